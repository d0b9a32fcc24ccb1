import os
import types

from tests.conftest import ROOT
from tests.scheduling import DEFAULT_SECONDS_PER_TEST, longest_first, read_seconds, seconds_of_junit


def items(*nodeids):
    return [types.SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


def test_files_start_longest_first_each_whole_and_in_its_own_order():
    collected = items("tests/a.py::one", "tests/a.py::two", "tests/b.py::one", "tests/c.py::x[1]",
                      "tests/c.py::x[2]", "tests/c.py::x[3]", "tests/d.py::one")
    seconds = {"tests/a.py": 5.0, "tests/d.py": 60.0}  # b and c are unknown: counted by their tests
    ordered = [item.nodeid for item in longest_first(collected, seconds)]
    assert 3 * DEFAULT_SECONDS_PER_TEST < 5.0
    assert ordered == ["tests/d.py::one", "tests/a.py::one", "tests/a.py::two", "tests/c.py::x[1]",
                       "tests/c.py::x[2]", "tests/c.py::x[3]", "tests/b.py::one"]


def test_the_recorded_seconds_name_the_suites_own_files(tmp_path):
    recorded = read_seconds()
    assert recorded and all(os.path.isfile(os.path.join(ROOT, name)) for name in recorded), \
        [name for name in recorded if not os.path.isfile(os.path.join(ROOT, name))]
    report = tmp_path / "junit.xml"
    report.write_text('<testsuites><testsuite><testcase classname="tests.scripts.test_x" name="a" time="1.25"/>'
                      '<testcase classname="tests.scripts.test_x" name="b" time="2"/>'
                      '<testcase classname="tests.test_y" name="c" time="0.5"/></testsuite></testsuites>')
    assert seconds_of_junit(str(report)) == {"tests/scripts/test_x.py": 3.2, "tests/test_y.py": 0.5}
