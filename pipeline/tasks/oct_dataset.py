"""The retinal OCT dataset's facts that its command line (oct.py) and its job (oct_job.py) both read:
where it is kept, its training-set size, its largest useful image size, the referral classes and how
a scan's file names its patient (imports no TensorFlow)."""
import os

DEFAULT_DATA_DIR = os.path.join(os.path.expanduser("~"), ".keras", "datasets", "kermany2018")
TRAIN_EXAMPLES = 83484  # OCT2017's training split
MAX_IMAGE_SIZE = 2048  # OCT2017's widest scans are 1536 pixels: larger sizes only upsample
# Kermany et al. 2018's urgent referrals: choroidal neovascularization and diabetic macular edema.
REFERRAL_CLASSES = ("CNV", "DME")
# OCT2017's file names are <CLASS>-<patient id>-<n>.jpeg: the patient is the test report's bootstrap group.
PATIENT_PATTERN = r"(?:CNV|DME|DRUSEN|NORMAL)-(\d+)-\d+\.jpe?g$"
