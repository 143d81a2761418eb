"""The campaigns page's files, served by the provider's app under ``/sms/campaigns/ui/``. Not public API.

A static page (HTML, one script, one style sheet, icons) that reads the JSON API with the login of
Airflow's UI: it holds no data itself, so it is served without a login, under a strict Content Security
Policy (its own files only, framed only by Airflow's UI on the same origin). Everything ships in the
wheel: no CDN.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, Response

UI_PREFIX = "/campaigns/ui"
FILES = Path(__file__).parent / "ui"
# The files the page is made of, and their types: nothing else under ui/ is served.
STATIC = {
    "campaigns.js": "text/javascript; charset=utf-8",
    "campaigns.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
    "icon-dark.svg": "image/svg+xml",
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

router = APIRouter()


@router.get("", include_in_schema=False)
async def without_slash() -> Response:
    # The page's links are relative to its folder.
    return RedirectResponse("ui/", status_code=308)


@router.get("/", include_in_schema=False)
async def page() -> Response:
    return FileResponse(FILES / "index.html", media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/static/{name}", include_in_schema=False)
async def static(name: str) -> Response:
    if name not in STATIC:
        return Response(status_code=404)
    return FileResponse(FILES / name, media_type=STATIC[name], headers=HEADERS)
