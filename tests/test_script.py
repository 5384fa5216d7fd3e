"""Splitting query files into statements at top-level semicolons only."""

from mangonel.compiler.script import split_statements


def test_semicolons_inside_strings_names_and_comments_do_not_split() -> None:
    script = (
        "-- a comment; with a semicolon\n"
        "CREATE STREAM `a;b` (ts TIMESTAMP) WITH (event_time = 'ts', note = 'x;y');\n"
        "\n"
        "/* block; comment */ SELECT 1;\n"
        ";\n"
    )
    statements = split_statements(script)
    assert [s.text.splitlines()[-1] for s in statements] == [
        "CREATE STREAM `a;b` (ts TIMESTAMP) WITH (event_time = 'ts', note = 'x;y')",
        "/* block; comment */ SELECT 1",
    ]
    assert [s.line for s in statements] == [1, 4]


def test_comment_only_pieces_are_not_statements() -> None:
    assert split_statements("-- nothing here\n;  \n-- still nothing") == []
