"""The retinal OCT dataset's facts that its command line (oct.py) and its job (oct_job.py) both read:
where it is kept, its training-set size, its largest useful image size, the referral classes, how
a scan's file names its patient and the flips no scan can be (imports no TensorFlow)."""
import os

DEFAULT_DATA_DIR = os.path.join(os.path.expanduser("~"), ".keras", "datasets", "kermany2018")
TRAIN_EXAMPLES = 83484  # OCT2017's training split
MAX_IMAGE_SIZE = 2048  # OCT2017's widest scans are 1536 pixels: larger sizes only upsample
# Kermany et al. 2018's urgent referrals: choroidal neovascularization and diabetic macular edema.
REFERRAL_CLASSES = ("CNV", "DME")
# OCT2017's file names are <CLASS>-<patient id>-<n>.jpeg: the patient is the test report's bootstrap group.
PATIENT_PATTERN = r"(?:CNV|DME|DRUSEN|NORMAL)-(\d+)-\d+\.jpe?g$"
# A horizontal flip is a scan of the other eye; upside down, the retina's layers come in an order no
# scan shows, and their order is what the classes differ in: --augment and --tta refuse these, in
# training and (recorded in the export) in predict.py.
_UPSIDE_DOWN = "an upside-down B-scan shows the retina's layers in an order no scan has"
FORBIDDEN_FLIPS = {"flip=vertical": _UPSIDE_DOWN, "flip=both": _UPSIDE_DOWN}
