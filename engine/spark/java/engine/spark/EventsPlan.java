package engine.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * Partitions of an {@code engine-events} read, planned from each journal's meta file: runs of
 * its persistence ids ({@link #plan}), those with no event in the asked range left out (as
 * {@code eventsource.EventsReader.partitions}); each id is replayed by following its own links, so
 * a partition never reads another id's blocks.
 */
final class EventsPlan {
    private EventsPlan() {
    }

    /**
     * The ids and the sequence-number range a read asks for: the options' intersected with the
     * filters Spark pushed ({@link EventsPushdown}); {@code hi} is exclusive.  An empty id set
     * selects nothing.
     */
    static final class Bounds implements Serializable {
        private static final long serialVersionUID = 1L;
        Set<String> ids;
        Long lo;
        Long hi;

        Bounds(EventsOptions o) {
            ids = o.ids == null ? null : new LinkedHashSet<>(o.ids);
            lo = o.lo;
            hi = o.hi;
        }

        void onlyIds(Set<String> some) {
            if (ids == null) {
                ids = new LinkedHashSet<>(some);
            } else {
                ids.retainAll(some);
            }
        }

        void atLeast(long seq) {
            lo = lo == null ? seq : Math.max(lo, seq);
        }

        void below(long seq) {
            hi = hi == null ? seq : Math.min(hi, seq);
        }

        /** {@code read_events}' replay range: from (>= 1) and to (inclusive; -1 none). */
        long fromSeq() {
            return lo == null ? 1 : Math.max(1, lo);
        }

        long toSeq() {
            return hi == null ? -1 : hi <= 1 ? 0 : hi - 1;
        }

        boolean keeps(EventsJournal.Entry e) {
            return e.live() > 0 && (ids == null || ids.contains(e.pid)) && (lo == null || lo <= e.highest)
                && (hi == null || hi > e.firstSeq);
        }

        /** How many events of {@code e} the range selects (exact: replay returns exactly these). */
        long rows(EventsJournal.Entry e) {
            long a = Math.max(e.firstSeq, fromSeq());
            long b = toSeq() < 0 ? e.highest : Math.min(e.highest, toSeq());
            return Math.max(0, b - a + 1);
        }
    }

    /** Some persistence ids of one journal, with the range to replay. */
    static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        final String directory;
        final String journal;
        final List<EventsJournal.Entry> ids;
        /** The journal's committed data length when planned (what the part reads up to). */
        final long end;
        final long fromSeq;
        final long toSeq;
        /** Events the part returns when nothing is damaged; the data bytes they span (estimated). */
        final long rows;
        final long bytes;

        Part(String directory, List<EventsJournal.Entry> ids, long end, long fromSeq, long toSeq, long rows,
             long bytes) {
            this.directory = directory;
            this.journal = journalName(directory);
            this.ids = ids;
            this.end = end;
            this.fromSeq = fromSeq;
            this.toSeq = toSeq;
            this.rows = rows;
            this.bytes = bytes;
        }
    }

    /** {@code eventsource.journal_name}: the directory's last component. */
    static String journalName(String directory) {
        String d = directory;
        while (d.endsWith("/")) {
            d = d.substring(0, d.length() - 1);
        }
        return d.substring(d.lastIndexOf('/') + 1);
    }

    /**
     * The parts of every journal in {@code directories} (each journal loaded once, checked as a
     * reader does): runs of ids in meta order, {@code idsPerPartition} each when given, else
     * holding about {@code 1 / minPartitions} of the selected events, at most
     * {@code eventsPerPartition} ({@code eventsource.EventsReader._groups}).
     */
    static List<Part> plan(Hfs fs, List<String> directories, Bounds bounds, EventsOptions o) {
        List<Part> parts = new ArrayList<>();
        for (String dir : directories) {
            EventsJournal j = EventsJournal.open(fs, dir);
            long live = 0;
            long total = 0;
            List<EventsJournal.Entry> kept = new ArrayList<>();
            for (EventsJournal.Entry e : j.ids()) {
                live += e.live();
                if (bounds.keeps(e)) {
                    kept.add(e);
                    total += bounds.rows(e);
                }
            }
            double perEvent = live == 0 ? 0 : (double) (j.committedSize() - EventsJournal.DATA_HEADER_SIZE) / live;
            long target = Math.min(o.eventsPerPartition, Math.max(1, -Math.floorDiv(-total, o.minPartitions)));
            List<EventsJournal.Entry> ids = new ArrayList<>();
            long rows = 0;
            for (EventsJournal.Entry e : kept) {
                ids.add(e);
                rows += bounds.rows(e);
                if (o.perPartition != null ? ids.size() == o.perPartition : rows >= target) {
                    parts.add(new Part(dir, ids, j.committedSize(), bounds.fromSeq(), bounds.toSeq(), rows,
                        (long) (rows * perEvent)));
                    ids = new ArrayList<>();
                    rows = 0;
                }
            }
            if (!ids.isEmpty()) {
                parts.add(new Part(dir, ids, j.committedSize(), bounds.fromSeq(), bounds.toSeq(), rows,
                    (long) (rows * perEvent)));
            }
        }
        fs.close();
        return parts;
    }
}
