"""Training scripts of the emoji world's networks (run by hand; the runtime never imports them).

* :mod:`~slics_core.emoji.training.train_clip` - the small/large CLIP-style encoders
  (``python -m slics_core.emoji.training.train_clip --size small|large``).
* :mod:`~slics_core.emoji.training.train_generator` - the generator's reader
  (``python -m slics_core.emoji.training.train_generator``).
* :mod:`~slics_core.emoji.training.train_classifier` - the judge
  (``python -m slics_core.emoji.training.train_classifier``).

Each writes its weights to ``assets/models/``; docs/emoji_world.md records the runs.
"""
