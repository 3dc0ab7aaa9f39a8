"""The fault and hostile-input catalogue (issue 23): each class, and the tests holding its cases.

A class is a kind of input a careful user or an attacker gives the tool; its cases are the tests
named here (each parametrised case counts). ``test_every_listed_test_exists`` keeps the catalogue
honest when tests are renamed. What the app trusts, refuses and limits: docs/security.md.
Earlier audits' classes with tests elsewhere are listed too (file-system faults, damaged caches).
"""
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CATALOGUE = {
    "1. labels that land on the wrong images": {
        "test_hostile_labels.py": [
            "test_repeated_file_names_in_two_folders_label_only_their_own_rows",  # clip-retrieval, set1/set2
            "test_each_folder_gets_its_own_rows",
            "test_bare_name_shared_by_two_ids_is_refused_naming_them",
            "test_labels_matching_no_id_is_an_error",
            "test_matching_uses_whole_path_components",
            "test_images_root_makes_a_short_name_exact",
            "test_two_label_rows_for_one_id_are_refused",
            "test_json_label_entries_are_named_in_messages",
            "test_folder_loader_refuses_ambiguous_and_duplicate_rows",
            "test_cli_import_prints_the_match_count",
        ],
    },
    "2. workspace rebuilds that delete users' files": {
        "test_hostile_workspace.py": [
            "test_rebuild_keeps_the_users_files_and_leaves_nothing_hidden",
            "test_two_caches_with_one_folder_name_do_not_replace_each_other",
            "test_empty_name_is_refused",
            "test_info_of_a_missing_path_says_so",
            "test_write_failure_names_the_users_folder_not_a_temp_file",
        ],
    },
    "3. links, names and captions that inject links or images": {
        "e2e/test_injection.py": ["test_no_page_shows_a_foreign_link_or_image"],  # 11 pages x 4 visits
        "test_hostile_markdown.py": [
            "test_code_is_one_code_span_holding_the_value",
            "test_text_escapes_every_mark_and_breaks_autolinks",
            "test_long_values_are_cut",
            "test_figure_text_escapes_html",
            "test_hostile_upload_name_and_text_query_are_shown_as_text",
            "test_sentences_written_below_the_pages_quote_workspace_names_as_code",
            "test_bidi_controls_are_shown_as_escapes",
            "test_home_shows_hostile_concept_names_as_text",
            "test_table_cuts_text_cells_and_keeps_numbers",
            "test_tables_show_bidi_controls_as_escapes_and_long_values_cut",
        ],
    },
    "4. damaged or hostile workspaces": {
        "test_hostile_workspace.py": [
            "test_damaged_arrays_give_one_line",  # missing arrays, wrong shapes, indices out of range
            "test_mistyped_or_missing_header_fields_give_one_line",
            "test_header_field_types_are_named_in_words",
            "test_header_that_is_not_an_object",
            "test_forged_npy_header_asking_for_terabytes_is_refused_before_allocating",
            "test_inflating_archive_is_refused",
            "test_forged_images_and_extras",
            "test_model_of_another_width_is_refused",
            "test_the_app_drops_a_damaged_ws_link",
        ],
    },
    "5. uploads that take too much memory": {
        "test_hostile_uploads.py": [
            "test_decode_over_the_memory_budget_is_refused_from_the_header",
            "test_the_budget_is_a_parameter",
            "test_a_large_jpeg_is_within_budget_through_reduced_decoding",
            "test_default_budget_accepts_a_twelve_megapixel_png",
            "test_a_huge_image_in_a_shared_workspace_is_a_grey_tile",
        ],
        "test_uploads.py": [
            "test_max_pixels_checked_before_decoding",
            "test_pillow_bomb_guard_is_an_upload_error",
            "test_non_images_named_png",
            "test_eps_is_refused_without_running_ghostscript",
            "test_truncated_file",
        ],
    },
    "6. messages that name the wrong thing": {
        "test_hostile_messages.py": [
            "test_bad_parquet_embedding_rows_name_file_row_and_column",
            "test_bad_parquet_rows_through_the_cli_give_one_line",
            "test_forged_npy_shard_header_is_refused_before_allocating",
            "test_cli_warnings_are_one_line_without_source",
            "test_fit_out_on_a_full_disk_names_the_users_file",
            "test_workspace_rebuild_failure_inside_a_model_file_names_the_folder",
            "test_the_app_names_no_server_folder_or_command_for_an_unknown_workspace",
            "test_the_app_names_no_server_folder_or_command_for_a_damaged_workspace",
            "test_visitor_messages_cut_server_folders_and_shell_advice",
            "test_a_failed_background_build_is_told_without_server_folders_and_logged_once",
            "test_a_link_naming_a_workspace_by_its_folder_path_is_told_what_ws_takes",
            "test_the_operator_reads_on_the_page_where_workspaces_are_listed_when_details_are_on",
            "test_the_command_that_adds_a_generator_is_on_the_page_only_for_the_operator",
        ],
        "test_hostile_labels.py": ["test_labels_that_are_a_folder_say_so"],
        "test_alignment.py": ["test_cli_object_array_is_one_line_saying_what_to_give"],
    },
    "7. file-system faults and damaged caches (earlier audit)": {
        "test_errors.py": ["test_cli_repairs_a_truncated_batch",
                           "test_every_reader_gives_the_one_damaged_file_sentence"],  # one case per reader
    },
}


def test_every_listed_test_exists():
    missing = []
    for cls, files in CATALOGUE.items():
        for name, tests in files.items():
            text = (TESTS / name).read_text(encoding="utf-8")
            missing += [f"{cls}: {name}::{t}" for t in tests if not re.search(rf"^def {t}\(", text, re.M)]
    assert not missing, missing


def test_every_hostile_test_is_listed():
    listed = {(n, t) for files in CATALOGUE.values() for n, tests in files.items() for t in tests}
    found = set()
    for path in [*TESTS.glob("test_hostile_*.py"), TESTS / "e2e" / "test_injection.py"]:
        if path.name == Path(__file__).name:
            continue
        name = str(path.relative_to(TESTS))
        found |= {(name, t) for t in re.findall(r"^def (test_\w+)\(", path.read_text(encoding="utf-8"), re.M)}
    assert not found - listed, sorted(found - listed)
