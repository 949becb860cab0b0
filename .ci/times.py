"""Where the suite's time went, from the JUnit XML report `.ci/run` asks pytest for.

    python .ci/times.py REPORT.xml [--top 30] [--write-table tests/test_times.tsv]

Prints the seconds each tier (tests/<dir>) and each of the slowest test files took, summed
over their tests: with two pytest workers these sums add up to about twice the wall time. A
run's record beside the last one's shows which part of the suite grew, where pytest's own
`--durations` names only the slowest tests.

--write-table writes every file's and tier's seconds and test count, the table
tests/conftest.py orders the run by (the longest tests first): a whole run's report refreshes it.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def file_of(classname: str) -> str:
    """`tests.e2e.test_http_server.TestX` → `tests/e2e/test_http_server.py`."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        if parts[end - 1].startswith("test_"):
            return "/".join(parts[:end]) + ".py"
    return "/".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--write-table", type=Path, metavar="PATH")
    args = parser.parse_args()
    per_file: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for case in ET.parse(args.report).iter("testcase"):
        name = file_of(case.get("classname", ""))
        per_file[name] += float(case.get("time", 0))
        tests[name] += 1
    per_tier: Counter[str] = Counter()
    for name, seconds in per_file.items():
        per_tier["/".join(name.split("/")[:2])] += seconds
    total = sum(per_file.values())
    print(f"test time summed over {sum(tests.values())} tests: {total / 60:.1f} min")
    for tier, seconds in per_tier.most_common():
        print(f"  {seconds / 60:7.1f} min  {tier}")
    print(f"slowest {args.top} files:")
    for name, seconds in per_file.most_common(args.top):
        print(f"  {seconds:7.0f} s  {tests[name]:4d} tests  {name}")
    if args.write_table:
        per_tier_tests: Counter[str] = Counter()
        for name, count in tests.items():
            per_tier_tests["/".join(name.split("/")[:2])] += count
        rows = [(seconds, per_tier_tests[tier], tier) for tier, seconds in per_tier.items()]
        rows += [(seconds, tests[name], name) for name, seconds in per_file.items()]
        args.write_table.write_text(
            f"# seconds\ttests\tpath (.ci/times.py --write-table, from {args.report.name})\n"
            + "".join(f"{seconds:.1f}\t{count}\t{path}\n" for seconds, count, path in sorted(rows, reverse=True)))


if __name__ == "__main__":
    main()
