"""What the sandbox's routes reach through their app: the account's state and the accepted token."""

from typing import Annotated

from fastapi import Depends, FastAPI, Request

from airflow_provider_sms.sandbox.state import SandboxState


def attach(app: FastAPI, state: SandboxState, token: str) -> None:
    """Give ``app``'s routes ``state`` and ``token``.

    :param app: the sandbox's application.
    :param state: the account the endpoints read and change.
    :param token: the access token accepted in ``Authorization: Bearer <token>``.
    """
    app.state.sandbox = state
    app.state.authorization = f"Bearer {token}"


# Async: a plain function would cost every request a hop to a worker thread.
async def sandbox_state(request: Request) -> SandboxState:
    """The state of the app serving ``request``.

    :param request: the request being served.
    """
    state: SandboxState = request.app.state.sandbox
    return state


def expected_authorization(request: Request) -> str:
    """The ``Authorization`` header the app serving ``request`` accepts.

    :param request: the request being served.
    """
    authorization: str = request.app.state.authorization
    return authorization


SandboxDep = Annotated[SandboxState, Depends(sandbox_state)]
