"""Per-op time of training steps from the Chrome-trace timelines that `--hooks profiler` writes
(timeline-<step>.json): where a step's time goes, op by op. Run as
`python -m benchmark.timeline MODEL_DIR/timeline-*.json`."""
import collections
import json
import sys


def op_times(path):
    """Returns {(op type, node name): microseconds} of the compute ops in one timeline file."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    compute = {e["pid"] for e in events
               if e.get("ph") == "M" and e.get("name") == "process_name" and "Compute" in e["args"]["name"]}
    times = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e["pid"] in compute:
            times[(e["args"].get("op", e["name"]), e["args"].get("name", e["name"]))] += e["dur"]
    return times


def summarize(paths, top=12):
    """Returns text lines: the mean milliseconds per step and share of each op, the largest first."""
    total = collections.Counter()
    for path in paths:
        total.update(op_times(path))
    all_time = sum(total.values())
    lines = [f"{len(paths)} step(s), {all_time / 1000 / len(paths):.1f} ms of op time per step"]
    for (op, node), micros in total.most_common(top):
        lines.append(f"{micros / 1000 / len(paths):8.2f} ms {100 * micros / all_time:5.1f}%  {op}  {node}")
    return lines


if __name__ == "__main__":
    print("\n".join(summarize(sys.argv[1:])))
