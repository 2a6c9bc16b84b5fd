"""The training curves of the few-shot image examples (omniglot,
miniimagenet): each learner's mean query loss after adaptation over the
meta-training steps, from train.jsonl, as training.png."""
from common import output_dir, training_curves

training_curves(output_dir())
