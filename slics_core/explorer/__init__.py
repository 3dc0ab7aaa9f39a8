"""What the app computes, without Streamlit: the app-support layer of SLiCS Explorer.

* :mod:`~slics_core.explorer.workspace` - the workspace model: its fields, saving, the checked
  reader, names and listing.
* :mod:`~slics_core.explorer.build` - the one workspace builder for every data source (COCO,
  MIRFlickr, folders, precomputed embeddings, the emoji world).
* :mod:`~slics_core.explorer.emoji_build` - the emoji world's workspace: its cache and the app's
  cold start (a build process speaking typed messages).
* :mod:`~slics_core.explorer.encoding` - query and text encoding, the caption vocabulary.
* :mod:`~slics_core.explorer.generation` - a workspace's image generator.
* :mod:`~slics_core.explorer.queries` - a query's components, concept scores, galleries.
* :mod:`~slics_core.explorer.maps` - t-SNE maps, atom heatmaps, caption tables.
* :mod:`~slics_core.explorer.scoring` - mAP of a workspace's fitted models (Evaluate page).
* :mod:`~slics_core.explorer.sphere` - the 3-D concept cones of the Learn page.
* :mod:`~slics_core.explorer.uploads` - decoding untrusted uploads.
* :mod:`~slics_core.explorer.quantized` - the quantized candidate pool of token embeddings (TiTok).

Imports point down only: this package uses the library (``slics_core.*``) and is used by
``app.py`` / ``app_pages`` and the command line; the library never imports it.
"""
