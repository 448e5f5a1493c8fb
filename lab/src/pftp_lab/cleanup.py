"""Remove what crashed labs left behind: `python -m pftp_lab.cleanup [--all] [--dry-run]`.

By default only namespaces `pl<4 hex>-*` whose owning process is gone (or unknown) are
removed, so a lab running in another process is left alone; `--all` removes every one.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from . import freezer
from .netns import LabError, delete_namespace, list_namespaces, require_root
from .registry import PREFIX, lab_id_of, load_record, pid_alive, registry_dir


def stale_namespaces(*, include_live: bool = False) -> list[str]:
    stale = []
    for ns in list_namespaces():
        lab_id = lab_id_of(ns)
        if lab_id is None:
            continue
        record = load_record(lab_id)
        if include_live or record is None or not pid_alive(record.owner_pid):
            stale.append(ns)
    return stale


def clean(*, include_live: bool = False, dry_run: bool = False) -> list[str]:
    """Delete stale lab namespaces (with their processes), workdirs and registry files."""
    removed = stale_namespaces(include_live=include_live)
    lab_ids = {lab_id_of(ns) for ns in removed}
    for rec_file in registry_dir().glob("*.json"):
        record = load_record(rec_file.stem)
        if record is None or include_live or not pid_alive(record.owner_pid):
            lab_ids.add(rec_file.stem)
    if dry_run:
        return removed
    # (a frozen process takes its SIGKILL only once thawed: Lab.freeze)
    groups = [g for lab_id in sorted(i for i in lab_ids if i)
              for g in freezer.groups_with_prefix(f"{PREFIX}{lab_id}-")]
    for group in groups:
        group.set_frozen(False)
    for ns in removed:
        delete_namespace(ns)
    for group in groups:
        group.remove()
    for lab_id in sorted(i for i in lab_ids if i):
        record = load_record(lab_id)
        if record is not None:
            workdir = Path(record.workdir)
            if workdir.name.startswith("pftp-lab-") and workdir.is_dir():
                shutil.rmtree(workdir, ignore_errors=True)
            record.remove()
        else:
            (registry_dir() / f"{lab_id}.json").unlink(missing_ok=True)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pftp_lab.cleanup", description=__doc__)
    parser.add_argument("--all", action="store_true", help="also remove labs whose owner lives")
    parser.add_argument("--dry-run", action="store_true", help="only list what would go")
    args = parser.parse_args(argv)
    try:
        require_root()
        removed = clean(include_live=args.all, dry_run=args.dry_run)
    except LabError as exc:
        print(f"pftp_lab.cleanup: {exc}", file=sys.stderr)
        return 2
    verb = "would remove" if args.dry_run else "removed"
    print(f"pftp_lab.cleanup: {verb} {len(removed)} namespace(s)" +
          (": " + " ".join(removed) if removed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
