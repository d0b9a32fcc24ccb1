"""Per-op time from a profiler timeline (Chrome trace), compute ops only."""
import json

from benchmark.timeline import op_times, summarize


def test_op_times_sum_the_compute_ops_by_type_and_node_and_leave_the_rest_out(tmp_path):
    path = tmp_path / "timeline-10.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:CPU:0 Compute"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:CPU:0 Tensors"}},
        {"ph": "X", "pid": 1, "name": "a", "dur": 3000, "args": {"op": "Conv2DBackpropFilter", "name": "conv/grad"}},
        {"ph": "X", "pid": 1, "name": "b", "dur": 1000, "args": {"op": "Conv2DBackpropFilter", "name": "conv/grad"}},
        {"ph": "X", "pid": 1, "name": "c", "dur": 1000, "args": {"op": "MaxPool", "name": "pool"}},
        {"ph": "X", "pid": 2, "name": "d", "dur": 9000, "args": {"op": "Tensor", "name": "t"}},
    ]}))
    assert op_times(str(path)) == {("Conv2DBackpropFilter", "conv/grad"): 4000, ("MaxPool", "pool"): 1000}
    lines = summarize([str(path), str(path)])
    assert lines[0] == "2 step(s), 5.0 ms of op time per step"
    assert lines[1].split() == ["4.00", "ms", "80.0%", "Conv2DBackpropFilter", "conv/grad"]
