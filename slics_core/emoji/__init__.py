"""The offline emoji world: COCO in miniature, made and trained by the project.

* :mod:`~slics_core.emoji.catalog` - categories, supercategories, sprite files.
* :mod:`~slics_core.emoji.scenes` - seeded scene generator (images, labels, captions).
* :mod:`~slics_core.emoji.models` - the small/large open_clip encoders (loading, embedding).
* :mod:`~slics_core.emoji.generator` - decoder from large-encoder embeddings to images.
* :mod:`~slics_core.emoji.diffusion` - tiny conditional diffusion model (the comparison the decoder won).
* :mod:`~slics_core.emoji.workspace` - cached workspace (scenes, embeddings, fitted SLiCS).
* :mod:`~slics_core.emoji.report` - quality numbers (``slics emoji-report --json``).
* training: ``python -m slics_core.emoji.train_clip --size small|large``,
  ``python -m slics_core.emoji.train_generator``, ``python -m slics_core.emoji.diffusion``.
"""
