"""Out of memory, on any device, as one line: where, how big a batch and image, and what to lower."""
import re
import sys

_DEVICE = re.compile(r"device:([A-Z]+:\d+)")
_SHAPE = re.compile(r"shape\s*\[([\d,\s]+)\]")


def out_of_memory_message(error, args):
    """Returns the one line for `error` when it is running out of memory (TensorFlow's
    ResourceExhaustedError, or Python's MemoryError), else None."""
    tf = sys.modules.get("tensorflow")
    if isinstance(error, MemoryError):
        device, shape = "CPU (host memory)", None
    elif tf is not None and isinstance(error, tf.errors.ResourceExhaustedError):
        device = _DEVICE.search(error.message or "")
        device = device.group(1) if device else "a device"
        shape = _SHAPE.search(error.message or "")
        shape = [int(n) for n in shape.group(1).split(",") if n.strip()] if shape else None
    else:
        return None
    batch = getattr(args, "batch_size", None)
    image_size = getattr(args, "image_size", None)
    if image_size:
        image = f" at {image_size}x{image_size} pixels"
    elif batch and shape and len(shape) == 4 and shape[0] == batch:  # images: batch, height, width, channels
        image = f" at {shape[1]}x{shape[2]} pixels"
    else:
        image = ""
    lower = "--batch-size" + (" or --image-size" if image_size else "")
    tensor = f" allocating a tensor of shape [{','.join(map(str, shape))}]" if shape else ""
    model_dir = getattr(args, "model_dir", None)
    kept = f"; checkpoints already in {model_dir} are kept" if model_dir else ""
    per_replica = f"{batch} images per replica" if batch else "the batch per replica asked for"
    return (f"out of memory on {device}{tensor}, with {per_replica}{image}: lower {lower} "
            f"(the learning rate follows the global batch){kept}")
