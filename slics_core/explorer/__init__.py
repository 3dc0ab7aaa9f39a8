"""What the app computes, without Streamlit: the app-support layer of SLiCS Explorer.

* :mod:`~slics_core.explorer.workspace` - the workspace model: its fields and names.
* :mod:`~slics_core.explorer.workspace_files` - a workspace's folder: saving, the one checked reader,
  listing.
* :mod:`~slics_core.explorer.build` - the one workspace builder for every data source (COCO,
  MIRFlickr, folders, precomputed embeddings, the emoji world).
* :mod:`~slics_core.explorer.emoji_build` - the emoji world's workspace: its cache and the app's
  cold start (a build process speaking typed messages).
* :mod:`~slics_core.explorer.encoding` - query and text encoding, the caption vocabulary.
* :mod:`~slics_core.explorer.generation` - a workspace's image generator.
* :mod:`~slics_core.explorer.queries` - a query's components, concept scores, galleries.
* :mod:`~slics_core.explorer.maps` - t-SNE maps of items, components and atoms, and reading them.
* :mod:`~slics_core.explorer.atom_tables` - atom usage, the Fig. 6 heatmaps, caption tables.
* :mod:`~slics_core.explorer.inspection` - an item's atoms and an atom's activations (Retrieve, Subspaces, Atoms).
* :mod:`~slics_core.explorer.arrival` - what the pages show on arrival, stored with the workspace.
* :mod:`~slics_core.explorer.narration`, :mod:`~slics_core.explorer.readings` - sentences and generator
  readings the pages show.
* :mod:`~slics_core.explorer.scoring` - mAP of a workspace's fitted models (Evaluate page).
* :mod:`~slics_core.explorer.sphere` - the 3-D concept cones of the Learn page.
* :mod:`~slics_core.explorer.uploads` - decoding untrusted uploads.
* :mod:`~slics_core.explorer.quantized` - the quantized candidate pool of token embeddings (TiTok).
* :mod:`~slics_core.explorer.exports`, :mod:`~slics_core.explorer.safe_text` - exports; untrusted text.
* :mod:`~slics_core.explorer.emoji_report` - the emoji world's quality report.

Where everything lives: ``docs/architecture.md``.

Imports point down only: this package uses the library (``slics_core.*``) and is used by
``app.py`` / ``app_pages`` and the command line; the library never imports it.
"""
