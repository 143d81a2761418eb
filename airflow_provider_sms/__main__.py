"""``python -m airflow_provider_sms prune``: delete old send guards and claims;
``python -m airflow_provider_sms prune-delivery-reports``: delete old campaigns' delivery reports.

Run them where ``airflow variables`` works (they use Airflow's metadata database), e.g. daily from cron
or a maintenance job. See :mod:`airflow_provider_sms.operators._retention` and
:mod:`airflow_provider_sms.delivery_reports.retention` for what is kept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dh])\s*$")


def _duration(text: str) -> dt.timedelta:
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of days or hours, e.g. 30d or 12h")
    amount, unit = float(match[1]), match[2]
    return dt.timedelta(days=amount) if unit == "d" else dt.timedelta(hours=amount)


def build_parser() -> argparse.ArgumentParser:
    """The command line: ``prune`` and ``prune-delivery-reports``, each ``[--older-than N] [--dry-run]``."""
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_sms")
    commands = parser.add_subparsers(dest="command", required=True)
    prune = commands.add_parser(
        "prune",
        help="delete send guards, claims and alert folds past their lifetime",
        description="Delete the send guards of task instances that ended longer ago than --older-than "
        "(never one whose task may still run or retry), the claims (with their numbers) delivered "
        "before the duplicate window, and the alert folds whose last alert went more than a day ago "
        "and that hold no alert. Unreadable guards are kept and listed.",
    )
    _add_prune_options(
        prune,
        keep="keep guards of task instances that ended more recently than this (default: [sms] "
        "record_retention_days, 30 days)",
        dry_run="list what would be deleted; delete nothing",
    )
    reports = commands.add_parser(
        "prune-delivery-reports",
        help="delete the delivery reports of campaigns whose last report is older than --older-than",
        description="Delete, campaign by campaign, the delivery reports, latest statuses and counts of the "
        "campaigns whose last report arrived longer ago than --older-than. Reports not yet in an asset "
        "event are never deleted: their campaign is kept and listed.",
    )
    _add_prune_options(
        reports,
        keep="keep campaigns with a report more recent than this (default: [sms] "
        "delivery_report_retention_days, 90 days)",
        dry_run="count what would be deleted; delete nothing",
    )
    return parser


def _add_prune_options(command: argparse.ArgumentParser, *, keep: str, dry_run: str) -> None:
    """``--older-than`` and ``--dry-run``, which every prune command takes, with their help texts."""
    command.add_argument("--older-than", type=_duration, default=None, help=keep)
    command.add_argument("--dry-run", action="store_true", help=dry_run)


def main(argv: list[str] | None = None) -> int:
    """Run the command; the exit code is 0 when it ran (unreadable records are reported, not errors)."""
    arguments = build_parser().parse_args(argv)
    if arguments.command == "prune-delivery-reports":
        return prune_delivery_reports(arguments.older_than, dry_run=arguments.dry_run)
    from airflow.utils.session import create_session

    from airflow_provider_sms.operators._retention import prune, retention

    older_than = arguments.older_than if arguments.older_than is not None else retention()
    with create_session() as session:
        report = prune(session, older_than=older_than, dry_run=arguments.dry_run)
        if arguments.dry_run:
            session.rollback()
    for key in report.deleted:
        print(f"{'would delete' if arguments.dry_run else 'deleted'}: {key}")
    for key, problem in report.unreadable.items():
        print(f"unreadable, kept: {key}: {problem}", file=sys.stderr)
    print(report.summary(dry_run=arguments.dry_run))
    return 0


def prune_delivery_reports(older_than: dt.timedelta | None, *, dry_run: bool) -> int:
    """``prune-delivery-reports``: one transaction; the campaigns kept are listed on stderr."""
    from airflow.utils.session import create_session

    from airflow_provider_sms.delivery_reports.retention import prune_reports, report_retention

    with create_session() as session:
        pruned = prune_reports(
            session, older_than=older_than if older_than is not None else report_retention(), dry_run=dry_run
        )
        if dry_run:
            session.rollback()
    for conn_id, campaign_id in pruned.waiting:
        print(f"kept: {conn_id} campaign {campaign_id} (reports not yet in an asset event)", file=sys.stderr)
    print(pruned.summary(dry_run=dry_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
