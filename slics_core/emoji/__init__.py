"""The offline emoji world: COCO in miniature, made and trained by the project.

* :mod:`~slics_core.emoji.catalog` - categories, supercategories, sprite files.
* :mod:`~slics_core.emoji.scenes` - seeded scene generator (images, labels, captions).
* :mod:`~slics_core.emoji.world` - the world as a dataset of the one workspace pipeline (used by the
  app and by ``slics embed/reproduce --dataset emoji``).
* :mod:`~slics_core.emoji.phrases`, :mod:`~slics_core.emoji.preview_table`,
  :mod:`~slics_core.emoji.weight_folders` - scene phrases, the preview's embedding table, weight folders.
* :mod:`~slics_core.emoji.models` - the small/large open_clip encoders (loading, embedding).
* :mod:`~slics_core.emoji.generator` - the generator: a large-encoder embedding read as the objects
  of a scene (with probabilities) and drawn with the world's sprites.
* :mod:`~slics_core.emoji.judge` - an independent classifier of generated pictures.
* :mod:`~slics_core.emoji.training` - the training scripts of those networks (never imported by
  the runtime).
"""
