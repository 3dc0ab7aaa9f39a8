"""AppTest of the Evaluate page on the (small) emoji workspace."""
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from streamlit_private import download_data, styler_display_values

from slics_core.metrics import evaluate_rankings
from slics_core.retrieval import ConceptRetriever, build_index

ROOT = Path(__file__).resolve().parent.parent


def independent(ws, method, d0, k, split="query", mode="partial"):
    """mAP@k of one method straight from slics_core.retrieval / evaluation (not scoring)."""
    q, p = ws.index[split], ws.index["pool"]
    if method == "UF":
        idx = build_index(ws.X[p], "exact").search(ws.X[q], k)[0]
    else:
        r = ConceptRetriever(ws.model(method, d0), ws.X[p], mode=mode, backend="exact")
        idx = r.search(ws.X[q], k, Y_query=ws.Y[q] if mode == "full" else None).indices
    res = evaluate_rankings(idx, ws.Y[q], ws.Y[p], ws.Z[q], ws.Z[p], ws.sub_to_concept, k=k)
    return res["general"], res["sub"]


def row(at, method):
    """The shown row of ``method``, its numbers read back (the page shows them to 3 decimals, "—" if absent)."""
    df = at.dataframe[0].value
    r = df[df["Method"] == method].iloc[0].copy()
    for c in r.index:
        if c.startswith(("Gen.", "Sub.")) or c == "d0":  # "0.660 [0.620, 0.700]": the score, then its interval
            r[c] = float("nan") if r[c] == "—" else float(str(r[c]).split(" [")[0])
    return r.rename(lambda c: c.split(" (ceiling")[0])


def test_evaluate_page_table_sweep_and_widgets(ws):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/evaluate.py").run()
    assert not at.exception, at.exception
    df = at.dataframe[0].value
    assert {"S-SVD", "S-SLiCS", "U-SLiCS", "UF"} <= set(df["Method"])
    assert "F-SpLiCE" in set(df["Method"]) or any("F-SpLiCE" in w.value for w in at.warning)
    # the S-SLiCS row equals an independent computation at the d0 shown
    r = row(at, "S-SLiCS")
    d0 = int(r["d0"])
    assert d0 == at.session_state["eval_d0"]
    gen, sub = independent(ws, "S-SLiCS", d0, 20)
    assert r["Gen. mAP@20"] == pytest.approx(gen, abs=5e-4)
    assert r["Sub. mAP@20"] == pytest.approx(sub, abs=5e-4)
    gen_f, sub_f = independent(ws, "S-SLiCS", d0, 20, mode="full")
    assert r["Gen. mAP@20 (v_j)"] == pytest.approx(gen_f, abs=5e-4)
    assert r["Sub. mAP@20 (v_j)"] == pytest.approx(sub_f, abs=5e-4)
    assert row(at, "UF")["Gen. mAP@20"] == pytest.approx(independent(ws, "UF", None, 20)[0], abs=5e-4)
    # chosen d0: best validation sub-label mAP (partial), independently computed
    vals = {d: independent(ws, "S-SLiCS", d, 20, split="val")[1] for d in ws.d0_values}
    best = max(vals, key=lambda d: (vals[d], -d))
    assert d0 == best
    assert f"d0 = {best}" in " ".join(m.value for m in at.markdown)

    # k changes the table
    at.number_input(key="eval_k").set_value(5).run()
    assert not at.exception
    r5 = row(at, "S-SLiCS")
    assert r5["Gen. mAP@5"] == pytest.approx(independent(ws, "S-SLiCS", int(r5["d0"]), 5)[0], abs=5e-4)
    # the split switches the queries
    at.radio(key="eval_split").set_value("val").run()
    assert not at.exception
    rv = row(at, "S-SLiCS")
    assert rv["Queries"] == "val"
    assert rv["Sub. mAP@5"] == pytest.approx(independent(ws, "S-SLiCS", int(rv["d0"]), 5, split="val")[1],
                                             abs=5e-4)
    # another d0
    other = [d for d in ws.d0_values if d != int(rv["d0"])][0]
    at.select_slider(key="eval_d0").set_value(other).run()
    assert not at.exception
    assert int(row(at, "S-SVD")["d0"]) == other
    assert row(at, "S-SVD")["Gen. mAP@5"] == pytest.approx(independent(ws, "S-SVD", other, 5, split="val")[0],
                                                          abs=5e-4)


def test_evaluate_sentence_names_the_best_non_oracle_method(ws):
    """On the emoji world the oracle row (F-SpLiCE over the label names) is in the table, labelled, and the
    page's first sentence names the best of the *other* rows, read from the table shown."""
    from slics_core.methods import ORACLE_FSPLICE

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/evaluate.py").run()
    assert not at.exception, at.exception
    df = at.dataframe[0].value
    assert ORACLE_FSPLICE in set(df["Method"])
    first = next(m.value for m in at.markdown if "ranks best" in m.value)
    others = {m: row(at, m)["Gen. mAP@20"] for m in df["Method"] if m != ORACLE_FSPLICE}
    best = max(others, key=others.get)
    assert f"{best} ranks best ({others[best]:.3f})" in first
    assert f"{ORACLE_FSPLICE} ranks best" not in first and f"{ORACLE_FSPLICE}: oracle" in first
    assert any(ORACLE_FSPLICE in c.value and "oracle" in c.value for c in at.caption)


def test_evaluate_exports_and_no_missing_cells(ws):
    """No None/<NA> cells in the shown table, CSVs carry their settings, charts are self-contained HTML."""
    import io

    import pandas as pd
    import plotly.graph_objects as go

    from slics_core.explorer.exports import figure_html, with_settings

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/evaluate.py").run()
    assert not at.exception, at.exception

    raw = at.dataframe[0].value
    # what the browser renders: the cells themselves (st.dataframe prints a null cell as "None" whatever a
    # Styler says), so the page sends text, and no Styler
    assert not styler_display_values(at.dataframe[0])
    shown = raw  # the cells as sent (.value reads the element's Arrow data)
    assert shown.isna().sum().sum() == 0
    cells = shown.astype(str).to_numpy().ravel().tolist()
    assert not {"None", "<NA>", "nan", "NaN", ""} & set(cells)
    uf = shown[raw["Method"].to_numpy() == "UF"].iloc[0]
    assert uf["d0"] == "—" and uf[[c for c in shown.columns if c.endswith("(v_j)")][0]] == "—"
    s_row = shown[raw["Method"].to_numpy() == "S-SLiCS"].iloc[0]
    assert s_row["Gen. mAP@20"].startswith(f"{row(at, 'S-SLiCS')['Gen. mAP@20']:.3f} [")
    html = figure_html(go.Figure(go.Scatter(x=[1, 2], y=[3, 4])))
    import re

    tags = re.findall(r"<script\b[^>]*>", html, flags=re.I)
    assert tags and not [t for t in tags if re.search(r"\bsrc\s*=", t, flags=re.I)]  # nothing loaded from outside
    assert "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js itself is inside the file
    df = with_settings(pd.DataFrame({"method": ["UF"], "d0": [None], "k": [20]}), workspace="w", split="query",
                       k=20, normalization="retrieved", table_d0=5)
    assert list(df.columns)[:5] == ["workspace", "split", "k", "normalization", "table_d0"]
    back = pd.read_csv(io.StringIO(df.to_csv(index=False)))
    assert back.loc[0, "table_d0"] == 5 and back.loc[0, "workspace"] == "w"
    with pytest.raises(ValueError, match="disagrees"):
        with_settings(pd.DataFrame({"k": [5]}), k=20)


def test_evaluate_shows_one_health_line_per_dictionary(ws):
    import numpy as np

    from app_pages._safe import text
    from slics_core.analysis import HEALTH_FLAGS, dictionary_health, firing

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/evaluate.py").run()
    assert not at.exception, at.exception
    d0 = int(at.session_state["eval_d0"])
    lines = [m.value for m in at.markdown if "mean cos(x, x̂)" in m.value and "active atoms per item" in m.value]
    assert len(lines) == len(ws.dictionary_methods())
    method = "S-SLiCS"
    line = next(v for v in lines if v.startswith(f"**{text(method)}**"))
    model = ws.model(method, d0)
    tr, va = ws.index["train"], ws.index["val"]
    flags = dictionary_health(model, ws.X[tr], ws.Y[tr])["flags"]
    for f in HEALTH_FLAGS:
        assert f"{sum(f in fl for fl in flags)} {f}" in line
    codes = model.transform(ws.X[va], ws.Y[va])
    R = codes @ model.atoms_
    cos = np.einsum("ij,ij->i", ws.X[va], R) / np.linalg.norm(ws.X[va], axis=1) / np.linalg.norm(R, axis=1)
    assert f"{firing(codes).sum(axis=1).mean():.2f} active atoms per item" in line
    assert f"mean cos(x, x̂) {cos.mean():.3f} on the validation split" in line


def test_stability_runs_in_the_background_and_is_stored(ws, media):
    """The Stability section: nothing runs until its button is pressed; the run goes on in the background with a
    progress bar; its tables (matched cos per concept from slics_core.stability.seed_stability, one row per atom
    across seeds and across methods, one U-SLiCS row per S̃) show when it is done, and a new session with the same
    settings reads them from the store at once."""
    import io
    import time

    import pandas as pd

    from slics_core.explorer.arrival import STORE
    from slics_core.explorer.scoring import eval_view
    from slics_core.stability import seed_stability

    for old in (Path(ws.path) / STORE).glob("stability-*.npz"):  # what an earlier run of this test stored
        old.unlink()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/evaluate.py").run()
    assert not at.exception, at.exception
    batch = 120

    def settle(at):
        at.number_input(key="stab_seeds").set_value(2)
        at.number_input(key="stab_iter").set_value(2)
        at.number_input(key="stab_batch").set_value(batch)
        at.multiselect(key="stab_n_active").set_value([1, 2])
        return at.run()

    settle(at)
    assert not at.exception, at.exception
    assert not [d for d in at.dataframe if "matched cos" in d.value.columns]
    assert any("Not run yet" in c.value for c in at.caption)
    at.button(key="stab_run").click().run()
    assert not at.exception, at.exception
    assert at.get("progress") or [d for d in at.dataframe if "matched cos" in d.value.columns]
    deadline = time.monotonic() + 600
    while not [d for d in at.dataframe if "matched cos" in d.value.columns]:
        assert time.monotonic() < deadline, "the stability run did not finish"
        time.sleep(2)
        at.run()
        assert not at.exception, at.exception
    data, split = eval_view(ws)
    d0 = int(at.session_state["eval_d0"])
    records, _, atoms = seed_stability(data, split, range(2), n_atoms=d0, n_iter=2, batch_size=batch, k=20)
    fresh = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    fresh.switch_page("app_pages/evaluate.py").run()
    settle(fresh)  # same settings, new session: from the store, no button
    assert not fresh.exception, fresh.exception
    table = next(d.value for d in fresh.dataframe if "matched cos" in d.value.columns)
    assert table["concept"].tolist() == ws.concept_names
    np.testing.assert_allclose(table["matched cos"].astype(float), [r["matched_cos"] for r in records], atol=5e-4)
    per_atom = next(d.value for d in fresh.dataframe if "seed 1 atom" in d.value.columns)
    assert per_atom["atom"].tolist() == [r["atom"] for r in atoms["seeds"]]
    assert per_atom["seed 1 cos"].tolist() == [f"{r['seed 1 cos']:.3f}" for r in atoms["seeds"]]
    methods = next(d.value for d in fresh.dataframe if "S-SVD atom" in d.value.columns)
    assert methods["U-SLiCS cos"].tolist() == [f"{r['U-SLiCS cos']:.3f}" for r in atoms["methods"]]
    from slics_core.stability import SHARED_BETWEEN_SEEDS

    assert any(SHARED_BETWEEN_SEEDS in c.value for c in fresh.caption)
    rows = next(d.value for d in fresh.dataframe if "S̃" in d.value.columns)
    assert rows["Method"].tolist() == ["U-SLiCS (S̃=1)", "U-SLiCS (S̃=2)"]
    button = next(b for b in fresh.get("download_button") if "stab_csv" in b.id)
    csv = pd.read_csv(io.BytesIO(download_data(media, button)))
    assert (csv["seeds"] == 2).all() and (csv["batch_size"] == batch).all() and (csv["d0"] == d0).all()
    np.testing.assert_allclose(csv["matched cos"], [r["matched_cos"] for r in records], atol=1e-9)


def test_evaluate_table_shows_bootstrap_intervals_and_recall_ceilings(ws):
    """Every score of the methods table carries the library's bootstrap interval over queries, each Recall@k
    column its ceiling (both independently recomputed), and the CSV has them as numbers."""
    from slics_core.evaluation import intervals_of, score_split
    from slics_core.explorer import scoring
    from slics_core.metrics import recall_at_k

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/evaluate.py").run()
    assert not at.exception, at.exception
    shown = at.dataframe[0].value
    d0 = int(at.session_state["eval_d0"])
    data, sp = scoring.eval_view(ws)
    idx = scoring.rank_split(ws, "S-SLiCS", d0, k=100)
    r = score_split(idx, data, sp, "query", k=20, recall_k=(20,), per_query=True)
    lo, hi = intervals_of({"s": [r["per_query"]["general"]]})["s"]
    cell = shown[shown["Method"] == "S-SLiCS"].iloc[0]["Gen. mAP@20"]
    assert cell == f"{r['general']:.3f} [{lo:.3f}, {hi:.3f}]"
    ceiling = recall_at_k(idx, ws.Y[sp.query], ws.Y[sp.pool], k=20)["ceiling_general"]
    assert f"Gen. Recall@20 (ceiling {ceiling:.3f})" in shown.columns
    assert any("bootstrap interval over queries" in c.value for c in at.caption)
