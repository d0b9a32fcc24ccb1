"""The order the suite's files start in: longest first, so that the three workers (pytest-xdist,
--dist loadfile, each file on one worker) end together instead of one starting the matrix last.

file_seconds.json holds each file's seconds in a full run (refresh it with
`python -m tests.scheduling <junit.xml of a full run>`); a file it does not name counts
DEFAULT_SECONDS_PER_TEST for each of its tests. The order changes only when tests start, never
what they do. With PIPELINE_TEST_CPU_LOG=FILE each test's CPU seconds (its worker's and the processes it
waited for) are appended to FILE: the suite is bound by its CPU, not by its longest file."""
import collections
import json
import os
import resource
import sys
import xml.etree.ElementTree as ElementTree

SECONDS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_seconds.json")
DEFAULT_SECONDS_PER_TEST = 1.3  # the median file's seconds per test in the run file_seconds.json records


def read_seconds(path=SECONDS_FILE):
    """Returns {test file relative to the repo (tests/...py): seconds} from `path`; {} when it is missing."""
    try:
        with open(path) as f:
            return json.load(f)["seconds"]
    except FileNotFoundError:
        return {}


def longest_first(items, seconds):
    """Returns `items` (pytest items) with their files in order of `seconds` (see the module), longest
    first; a file's items stay together and in their own order."""
    by_file = collections.defaultdict(list)
    for item in items:
        by_file[item.nodeid.split("::")[0]].append(item)

    def weight(path):
        return seconds.get(path, DEFAULT_SECONDS_PER_TEST * len(by_file[path]))
    return [item for path in sorted(by_file, key=lambda p: (-weight(p), p)) for item in by_file[path]]


CPU_LOG_VARIABLE = "PIPELINE_TEST_CPU_LOG"  # a file each test's CPU seconds are appended to, when set


def cpu_seconds():
    """Returns the CPU seconds (user + system) this process and its waited-for children have used."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def record_cpu(path, nodeid, seconds):
    """Appends one JSON line {test, cpu} to `path` (the workers of a run append to the same file)."""
    with open(path, "a") as f:
        f.write(json.dumps({"test": nodeid, "cpu": round(seconds, 2)}) + "\n")


def cpu_of_log(path):
    """Returns {test file: CPU seconds} summed over the lines of a CPU log (see CPU_LOG_VARIABLE)."""
    cpu = collections.Counter()
    with open(path) as f:
        for line in f:
            entry = json.loads(line)
            cpu[entry["test"].split("::")[0]] += entry["cpu"]
    return {name: round(total, 1) for name, total in cpu.most_common()}


def seconds_of_junit(path):
    """Returns {test file: seconds} summed over the test cases of the JUnit XML report at `path`."""
    seconds = collections.Counter()
    for case in ElementTree.parse(path).iter("testcase"):
        seconds[case.get("classname").replace(".", "/") + ".py"] += float(case.get("time"))
    return {name: round(total, 1) for name, total in sorted(seconds.items())}


def main(argv):
    """Rewrites file_seconds.json from the JUnit XML report argv[0] and what argv[1] says of the run."""
    if len(argv) != 2:
        print("usage: python -m tests.scheduling JUNIT_XML 'MACHINE AND DATE'", file=sys.stderr)
        return 2
    with open(SECONDS_FILE, "w") as f:
        json.dump({"measured": argv[1], "seconds": seconds_of_junit(argv[0])}, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
