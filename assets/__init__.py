"""The emoji world's shipped assets (sprites, models, preview table), installed as package data.

Read through :data:`slics_core.weights.ASSETS_DIR`; licences in ``emoji/NOTICE`` and ``models/*/NOTICE``.
"""
