"""A loaded classifier as the client sees it, whatever its file: a SavedModel export
(serving.predict) or a TFLite model (serving.tflite)."""
import dataclasses
from typing import Callable, List, Optional, Tuple

from serving import ExportNotFoundError


@dataclasses.dataclass
class Predictor:
    """An exported classifier: its class names and `classify`, a function from a list of image file
    contents to (probabilities [n, classes], the predicted class names [n]); with a pixels signature,
    the shape of one image's pixels and `classify_pixels`, the same from uint8 [n, *pixels_shape]."""
    export_dir: str
    class_names: List[str]
    classify: Callable
    pixels_shape: Optional[Tuple[int, ...]] = None
    classify_pixels: Optional[Callable] = None
    fast_decode: bool = False  # image files decoded with libjpeg's reduced decoding, as the export does
    forbidden_views: dict = dataclasses.field(default_factory=dict)  # --tta views its job refuses: {name: why}

    @property
    def channels(self):
        """Returns the channels the model decodes image files to (1 or 3), or None when its export does not
        say (no pixels signature)."""
        return self.pixels_shape[-1] if self.pixels_shape else None


def check_class_count(class_names, outputs, names_path, model_path):
    """Raises ExportNotFoundError when `names_path` names another number of classes than the model at
    `model_path` has `outputs`: every probability would be shown under another class's name."""
    if len(class_names) != outputs:
        raise ExportNotFoundError(f"{names_path} names {len(class_names)} class{'' if len(class_names) == 1 else 'es'} "
                                  f"but the model at {model_path} has {outputs} outputs: use the class_names.txt of the run that made the model")
