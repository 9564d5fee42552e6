"""The event journal's reader: a snapshot of what was committed, without the
writer lock and without repairing anything.

A reader sees what was committed when it opened (or last called
:meth:`EventReader.refresh`), even while a writer keeps appending: committed
blocks never change, and the reader never looks past the committed length.
"""

from __future__ import annotations

from os import PathLike

from engine.conventions import serializer as parse_serializer
from engine.errors import ConfigError, CorruptFileError, FormatError
from engine.events.blocks import DEFAULT_READAHEAD
from engine.events.layout import DATA_NAME, META_NAME, META_TMP_NAME, join
from engine.events.metafile import MetaFile
from engine.events.recovery import Loaded, load
from engine.events.sumfiles import load_data_sums, open_meta_sums
from engine.events.view import EventView, log
from engine.fs import FileSystem, OpenMode, as_path, no_such, resolve
from engine.fs.core import StoreCore

#: A snapshot read while the writer rewrote meta is read again, this many times at most.
SNAPSHOT_ATTEMPTS = 5


class EventReader(EventView):
    """A read-only view of an event journal directory (see the module docstring).

    Replay and the queries are :class:`~engine.events.view.EventView`'s.
    """

    _past_end = 0  # bytes past the committed end when loaded (the snapshot skips them)

    @classmethod
    def open(
        cls,
        directory: str | PathLike[str],
        *,
        readahead: int = DEFAULT_READAHEAD,
        serializer: object = None,
        fs: FileSystem | None = None,
    ) -> EventReader:
        """Open the journal in ``directory`` for reading (no lock, no repair).

        ``serializer`` decodes ``event.value`` as in
        :meth:`EventJournal.open <engine.events.journal.EventJournal.open>`.
        Raises FileNotFoundError (no journal there), ConfigError (half a
        journal), CorruptFileError / FormatError (damaged or foreign files).
        """
        directory = as_path(directory, "directory")
        fs = resolve(fs)
        codec = parse_serializer(serializer)
        data_path = join(directory, DATA_NAME)
        meta_path = join(directory, META_NAME)
        missing = [path for path in (meta_path, data_path) if not fs.exists(path)]
        if len(missing) == 2:  # nothing of a journal there (or no permission to look)
            raise no_such(fs, directory, "event journal", probe=meta_path if fs.isdir(directory) else None)
        if missing:
            raise ConfigError(f"{directory}: not an event journal ({missing[0]} is missing)")
        core = StoreCore(fs, directory, "event journal", writer=False)
        with core.opening():
            data = core.keep(fs.open(data_path, OpenMode.READ))
            meta = MetaFile(fs, meta_path, join(directory, META_TMP_NAME), fs.open(meta_path, OpenMode.READ),
                            durable=False)
            core.keep(meta)
            reader = cls(core, data, meta, readahead=readahead, serializer=codec)
            reader._load_snapshot()  # (this class's own object, being built)
        core.opened(reader)
        return reader

    def refresh(self) -> None:
        """Take a new snapshot of what is committed now."""
        with self._lock:
            self._core.check_open()
            # The writer may have replaced ``meta`` (atomic rewrite): open it anew.
            self._meta.reopen_read()
            self._load_snapshot()

    def _load_snapshot(self) -> None:
        # A writer updating meta while we read it can be seen half-way; a few
        # retries give a consistent picture (each retry re-reads the whole file).
        for attempt in range(SNAPSHOT_ATTEMPTS):
            try:
                self._replace_sums(msums=open_meta_sums(self._fs, self._msums.path, writer=False))
                loaded = load(self._data, self._meta.handle, self.data_path, self.meta_path, report=None,
                              meta_sums=self._msums)
                self._replace_sums(dsums=load_data_sums(self._fs, self._dsums.path, self._data, self.data_path,
                                                        loaded.end, None))
                self._install(loaded)
                if len(self._msums.entries) < len(loaded.entries):
                    log.warning("event journal %s: %d persistence id(s) have no checksum in %s (a writer "
                                "crashed before syncing it, or the journal predates it)", self.directory,
                                len(loaded.entries) - len(self._msums.entries), self._msums.path)
                return
            except FormatError:
                raise  # a foreign file does not change by re-reading it
            except CorruptFileError:
                if attempt == SNAPSHOT_ATTEMPTS - 1:
                    raise

    def _install(self, loaded: Loaded) -> None:
        super()._install(loaded)
        self._past_end = self._data.size() - loaded.end

    def _past_committed_end(self) -> int:
        return self._past_end


__all__ = ["EventReader"]
