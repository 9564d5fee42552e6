package engine.spark;

import java.util.List;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A queue <em>reader</em> as a Structured Streaming source whose items are confirmed once Spark
 * has committed the micro-batch that carried them.
 *
 * <p>The driver takes items through the queue's one consumer protocol, in a child process
 * ({@link QueueBridge}, {@code engine.spark.queuebridge}); the executors read them from the journal
 * files ({@link QueueBatchReader}), only the ids the reader handed out. The offset is
 * {@code {"id": highest id handed out}} (the Python source's JSON): a reader that never aborts
 * gets items in id order, so everything up to it has been handed to Spark.
 *
 * <p>Spark calls {@link #commit} for batch N only when it plans batch N+1, so when a query stops or
 * crashes the items of its last batch are still unconfirmed: delivery is <b>at least once</b>. With
 * the same checkpoint location a restarted query replays a planned, uncommitted batch from the files
 * (the reader's pending items in its id range), and its reader skips (and confirms) the items its
 * offsets say were processed; a consumer without that checkpoint gets them again. A replayed batch
 * whose ids are gone from the journal (its files retired meanwhile: another consumer of the reader
 * confirmed them) fails the query naming the journal's oldest file, or with
 * {@code failOnDataLoss=false} is logged and read for what is left.
 *
 * <p>{@code maxRecordsPerTrigger} (default 1000) and {@code maxBytesPerTrigger} (data bytes; at
 * least one item) bound a micro-batch; {@code Trigger.AvailableNow} stops at the journal's last id
 * when the query started, or at the first take that finds nothing (items other consumers of the
 * reader hold then are left for a later run).
 */
public final class QueueStream implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
    private static final Logger LOG = LoggerFactory.getLogger("engine.spark");
    private final StructType schema;
    private final QueueOptions options;
    private final Hfs fs;
    private final String directory;
    private final String queue;
    private final String reader;
    /** The ids handed out per planned batch end (not yet committed), as runs [lo, hi, ...]. */
    private final TreeMap<Long, long[]> handed = new TreeMap<>();
    private QueueBridge bridge;
    /** Trigger.AvailableNow: the journal's last id when the query started (-1: none). */
    private long target = -1;

    QueueStream(StructType schema, QueueOptions options) {
        this.schema = schema;
        this.options = options;
        this.fs = LogSource.driverFs();
        this.directory = options.streamDirectory(fs);  // a bad path or queue option fails the query's start
        this.queue = options.streamQueue();
        this.reader = options.streamReader();
        fs.close();
    }

    /** The offset: the highest id handed out. */
    static final class IdOffset extends Offset {
        final long id;

        IdOffset(long id) {
            this.id = id;
        }

        @Override
        public String json() {
            return "{\"id\": " + id + "}";
        }
    }

    private static long id(Offset o) {
        return o == null ? 0 : ((IdOffset) o).id;
    }

    private QueueBridge bridge() {
        if (bridge == null) {
            bridge = new QueueBridge(directory, queue, reader);
        }
        return bridge;
    }

    @Override
    public Offset initialOffset() {
        return new IdOffset(0);
    }

    @Override
    public Offset deserializeOffset(String json) {
        try {
            JsonNode id = new ObjectMapper().readTree(json).get("id");
            if (id != null && id.canConvertToLong()) {
                return new IdOffset(id.asLong());
            }
        } catch (java.io.IOException e) {
            // reported below
        }
        throw new ConfigException(QueueOptions.SOURCE + ": offset " + json + " is not {\"id\": n}");
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return ReadLimit.maxRows(options.maxRecords);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        target = lastId(fs, directory, queue);
        fs.close();
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("latestOffset(start, limit) is the entry point");
    }

    /** Takes the next batch's items from the reader (the only call that does). */
    @Override
    public Offset latestOffset(Offset startOffset, ReadLimit limit) {
        long start = id(startOffset);
        long rows = limit instanceof ReadMaxRows ? ((ReadMaxRows) limit).maxRows() : -1;
        long bytes = options.maxBytes == null ? -1 : options.maxBytes;
        if (target == 0 || (target > 0 && start >= target)) {
            return new IdOffset(start);  // AvailableNow: everything there at the start was read
        }
        String[] got = bridge().call("get " + rows + " " + bytes + " " + start + " " + target);
        long count = Long.parseLong(got[0]);
        long last = Long.parseLong(got[1]);
        if (count == 0 || last <= start) {
            return new IdOffset(start);
        }
        handed.put(last, runs(got[2]));
        return new IdOffset(last);
    }

    /** "a-b,c-d" -> [a, b, c, d]. */
    static long[] runs(String text) {
        if (text.equals("-")) {
            return new long[0];
        }
        String[] parts = text.split(",");
        long[] out = new long[2 * parts.length];
        for (int k = 0; k < parts.length; k++) {
            int dash = parts[k].indexOf('-', 1);
            out[2 * k] = Long.parseLong(parts[k].substring(0, dash));
            out[2 * k + 1] = Long.parseLong(parts[k].substring(dash + 1));
        }
        return out;
    }

    @Override
    public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
        long start = id(startOffset);
        long end = id(endOffset);
        if (end <= start) {
            return new InputPartition[0];
        }
        long[] only = handed.get(end);
        QueuePlan.Part part;
        if (only != null) {
            // Ids the reader handed out (one given back by another consumer may be below start).
            long after = only.length == 0 ? start : Math.min(start, only[0] - 1);
            part = new QueuePlan.Part(directory, queue, reader, after, end, List.of(), 0, only, options.failOnDataLoss);
        } else {
            // A batch planned before a restart: the reader's pending items in its range, from the files.
            checkReplay(start, end);
            part = new QueuePlan.Part(directory, queue, reader, start, end, List.of(), 0);
        }
        return new InputPartition[] {part};
    }

    /** A replayed batch's ids (start, end] below the journal's oldest file are gone from it. */
    private void checkReplay(long start, long end) {
        List<QueuePlan.Segment> segs = QueuePlan.listSegments(fs, directory, queue, false, List.of());
        fs.close();
        QueuePlan.Segment oldest = null;
        for (QueuePlan.Segment s : segs) {
            if (s.firstId >= 0) {
                oldest = s;
                break;
            }
        }
        if (oldest != null && oldest.firstId <= start + 1) {
            return;
        }
        long lastGone = oldest == null ? end : Math.min(end, oldest.firstId - 1);
        String where = oldest == null ? "the journal holds no file" : "the journal's oldest file " + oldest.path
            + " starts at id " + oldest.firstId + " (offset 0)";
        String what = QueueOptions.SOURCE + " stream of queue '" + queue + "', reader '" + reader + "' in " + directory
            + ": items " + (start + 1) + ".." + lastGone + " of the micro-batch replayed after a restart (ids "
            + (start + 1) + ".." + end + ") are gone from the journal: " + where;
        if (options.failOnDataLoss) {
            throw new IllegalStateException(what + " (set failOnDataLoss=false to go on without them)");
        }
        LOG.warn("{}; going on without them (failOnDataLoss=false)", what);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return QueueSource.factory(fs, schema, options.mode);
    }

    /** Spark committed the batch ending at {@code end}: its items are confirmed and checkpointed. */
    @Override
    public void commit(Offset end) {
        long upto = id(end);
        handed.headMap(upto, true).clear();
        if (bridge != null) {
            // (Without a reader yet, after a restart: the next take skips and confirms them.)
            bridge.call("confirm " + upto);
        }
    }

    @Override
    public void stop() {
        if (bridge != null) {
            bridge.close();
            bridge = null;
        }
        fs.close();
    }

    /** The journal's last id now (0: none), from its newest file holding items (Trigger.AvailableNow's end;
     * damage ends the count where it is: the reads report it). */
    static long lastId(Hfs fs, String directory, String queue) {
        List<QueuePlan.Segment> segs = QueuePlan.listSegments(fs, directory, queue, false, List.of());
        for (int k = segs.size() - 1; k >= 0; k--) {
            QueuePlan.Segment s = segs.get(k);
            if (s.firstId < 0 || !fs.exists(s.path)) {
                continue;
            }
            long[] last = {0};
            byte[] data = fs.readAll(s.path);
            try {
                QueueFiles.readJournal(s.path, data, data.length, 0, -1, true, (c, before) -> {
                    last[0] = c.ids[c.items - 1];
                    return true;
                });
            } catch (CorruptFileException e) {
                // the ids before the damage count
            }
            if (last[0] > 0) {
                return last[0];
            }
        }
        return 0;
    }
}
