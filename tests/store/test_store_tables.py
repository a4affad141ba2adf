"""A plugin's own tables (``register_tables``): created on first open, migrated by the plugin's
own steps with every row kept, versioned per plugin; a broken table set is left out with one
warning and never keeps the store from opening. SQLite and PostgreSQL."""

from __future__ import annotations

import logging
from pathlib import Path

import peewee as pw
import pytest
from playhouse.migrate import SchemaMigrator, migrate

from llamaherd import hookimpl
from llamaherd.store import Store, StoreError, Tables
from llamaherd.types import TableSet


def notes_v1(db: pw.Database) -> list[type[pw.Model]]:
    class Note(pw.Model):
        text = pw.TextField()
        at = pw.DoubleField()

        class Meta:
            database = db
            table_name = "test_notes"

    return [Note]


def notes_v2(db: pw.Database) -> list[type[pw.Model]]:
    """Version 2: notes have an author, and tags are new."""

    class Note(pw.Model):
        text = pw.TextField()
        at = pw.DoubleField()
        author = pw.TextField(default="someone")

        class Meta:
            database = db
            table_name = "test_notes"

    class Tag(pw.Model):
        note = pw.IntegerField()
        name = pw.TextField()

        class Meta:
            database = db
            table_name = "test_tags"

    return [Note, Tag]


def add_author(db: pw.Database, tables: Tables) -> None:
    migrate(SchemaMigrator.from_database(db).add_column("test_notes", "author", tables.Note.author))


def prune_notes(tables: Tables, cutoff: float) -> int:
    return tables.Note.delete().where(tables.Note.at < cutoff).execute()


V1 = TableSet(name="notes", version=1, define=notes_v1, prune=prune_notes)
V2 = TableSet(name="notes", version=2, define=notes_v2, migrations=[(2, add_author)])


class NotesPlugin:
    def __init__(self, *table_sets: TableSet) -> None:
        self.table_sets = table_sets

    @hookimpl
    def register_tables(self, register):
        for table_set in self.table_sets:
            register(table_set)


def stamps(store: Store) -> dict[str, str]:
    return {row.key: row.value for row in store._m.MetaKV.select()}


def columns(store: Store, table: str) -> set[str]:
    return {column.name for column in store._db.get_columns(table)}


def test_a_registered_plugins_tables_are_created_on_first_open(
    database_url, registered_plugin
) -> None:
    registry = registered_plugin(NotesPlugin(V1), "notes-plugin")
    assert registry.table_sets["notes"] is V1 and registry.owner[("table_sets", "notes")] == (
        "notes-plugin"
    )
    store = Store.open(database_url)
    Note = store.tables("notes").Note
    with store.atomic():
        Note.create(text="hello", at=store.clock())
    with store.guard():
        assert [note.text for note in Note.select()] == ["hello"]
    assert stamps(store)["schema_version:notes"] == "1"
    assert "test_notes" in store._db.get_tables()
    store.close()


def test_a_plugins_own_steps_migrate_its_tables_keeping_every_row(database_url) -> None:
    store = Store.open(database_url, tables=[V1])
    with store.atomic():
        for n in range(3):
            store.tables("notes").Note.create(text=f"note {n}", at=float(n))
    store.close()

    store = Store.open(database_url, tables=[V2])
    tables = store.tables("notes")
    assert tables.version == 2 and stamps(store)["schema_version:notes"] == "2"
    assert [(n.text, n.author) for n in tables.Note.select().order_by(tables.Note.id)] == [
        ("note 0", "someone"), ("note 1", "someone"), ("note 2", "someone"),
    ]  # fmt: skip
    assert "test_tags" in store._db.get_tables(), "a new table needs no step"
    assert "author" in columns(store, "test_notes")
    assert Store.open(database_url, tables=[V2]).tables("notes").version == 2, (
        "opening again: no-op"
    )
    store.close()


def test_a_failing_step_leaves_the_set_out_and_rolls_its_changes_back(database_url, caplog) -> None:
    Store.open(database_url, tables=[V1]).close()

    def half_done(db: pw.Database, tables: Tables) -> None:
        add_author(db, tables)
        raise RuntimeError("step 2 went wrong")

    broken = TableSet(name="notes", version=2, define=notes_v2, migrations=[(2, half_done)])
    caplog.set_level(logging.WARNING, logger="llamaherd.store")
    store = Store.open(database_url, tables=[broken])
    assert "tables 'notes' left out: RuntimeError: step 2 went wrong" in caplog.text
    with pytest.raises(StoreError, match="the tables of 'notes' are unavailable: RuntimeError"):
        store.tables("notes")
    assert stamps(store)["schema_version:notes"] == "1"
    assert "author" not in columns(store, "test_notes"), "the step's change was rolled back"
    assert store.enqueue("alpha", "manual", {}) is not None, "the store itself works"
    assert Store.open(database_url, tables=[V2]).tables("notes").version == 2, (
        "a fixed plugin migrates"
    )


def test_tables_newer_than_the_plugin_knows_are_left_alone(database_url) -> None:
    Store.open(database_url, tables=[V2]).close()
    store = Store.open(database_url, tables=[V1])
    with pytest.raises(StoreError, match="at version 2, newer than the plugin"):
        store.tables("notes")
    assert stamps(store)["schema_version:notes"] == "2"


def test_a_table_of_core_or_another_plugin_is_not_taken(tmp_path: Path) -> None:
    def runs_table(db: pw.Database) -> list[type[pw.Model]]:
        class Mine(pw.Model):
            class Meta:
                database = db
                table_name = "runs"

        return [Mine]

    def notes_again(db: pw.Database) -> list[type[pw.Model]]:
        return notes_v1(db)

    store = Store.open(
        f"sqlite:///{tmp_path}/db.db",
        tables=[
            TableSet(name="greedy", version=1, define=runs_table),
            V1,
            TableSet(name="copycat", version=1, define=notes_again),
        ],
    )
    with pytest.raises(StoreError, match="table 'runs' belongs to core or another plugin"):
        store.tables("greedy")
    with pytest.raises(StoreError, match="table 'test_notes' belongs to core or another plugin"):
        store.tables("copycat")
    assert store.tables("notes").Note._meta.table_name == "test_notes"


def test_prune_reaches_each_plugins_tables(tmp_path: Path) -> None:
    clock = lambda: 100 * 86400.0  # noqa: E731
    store = Store.open(f"sqlite:///{tmp_path}/db.db", clock=clock, tables=[V1])
    Note = store.tables("notes").Note
    with store.atomic():
        Note.create(text="old", at=0.0)
        Note.create(text="new", at=99 * 86400.0)
    assert store.prune(14) == 1
    assert [note.text for note in Note.select()] == ["new"]


def test_a_failing_prune_spoils_neither_core_upkeep_nor_other_plugins(tmp_path, caplog) -> None:
    def broken_prune(tables: Tables, cutoff: float) -> int:
        raise RuntimeError("prune went wrong")

    def other_notes(db: pw.Database) -> list[type[pw.Model]]:
        class Other(pw.Model):
            at = pw.DoubleField()

            class Meta:
                database = db
                table_name = "test_other"

        return [Other]

    clock = lambda: 100 * 86400.0  # noqa: E731
    broken = TableSet(name="broken", version=1, define=other_notes, prune=broken_prune)
    store = Store.open(f"sqlite:///{tmp_path}/db.db", clock=clock, tables=[broken, V1])
    with store.atomic():
        store.tables("notes").Note.create(text="old", at=0.0)
    caplog.set_level(logging.WARNING, logger="llamaherd.store")
    assert store.prune(14) == 1, "the notes' prune still ran"
    assert "prune of tables 'broken' failed: RuntimeError: prune went wrong" in caplog.text


def test_a_model_missing_from_the_tables_is_named(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/db.db", tables=[V1])
    with pytest.raises(AttributeError, match="have no model 'Tag' \\(models: Note\\)"):
        store.tables("notes").Tag  # noqa: B018


def test_registration_refuses_what_is_not_a_table_set(registered_plugin, capsys) -> None:
    class Impostor:
        name = "impostor"
        version = 1

    class Plugin:
        @hookimpl
        def register_tables(self, register):
            register(Impostor())
            register(V1)

    registry = registered_plugin(Plugin(), "impostor-plugin")
    assert registry.table_sets["notes"] is V1 and "impostor" not in registry.table_sets
    assert "Impostor 'impostor' is not a TableSet" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("version", "steps", "problem"),
    [
        (0, [], "version must be an integer >= 1"),
        (2, [(3, add_author)], "migration versions must ascend"),
        (3, [(3, add_author), (2, add_author)], "migration versions must ascend"),
        (2, [(1, add_author)], "each above 1"),
    ],
)
def test_a_table_set_checks_its_versions(version, steps, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        TableSet(name="notes", version=version, define=notes_v1, migrations=steps)
