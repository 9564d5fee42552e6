package engine.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

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
 * Structured Streaming over append logs, as Kafka's source: the JVM twin of
 * {@code logsource.LogStreamReader}.  The offset is {@code {log name: {"index": next}}}
 * (the Python source's JSON, so a checkpoint reads the same); {@code maxRecordsPerTrigger}
 * and {@code maxBytesPerTrigger} bound a micro-batch; {@code Trigger.AvailableNow} stops at
 * what existed when the query started; records deleted (TTL expiry, truncation) before the
 * query read them fail it unless {@code failOnDataLoss=false}.
 */
public final class LogStream implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
    private static final Logger LOG = LoggerFactory.getLogger("engine.spark");
    private final StructType schema;
    private final LogOptions options;
    private final LogPlan.Bounds bounds;
    private final Hfs fs;
    private final List<String> paths;
    private final Long maxRecords;
    private final Long maxBytes;
    private Map<String, Long> target;

    LogStream(StructType schema, LogOptions options, LogPlan.Bounds bounds) {
        options.checkStream();
        this.schema = schema;
        this.options = options;
        this.bounds = bounds;
        this.fs = LogSource.driverFs();
        this.paths = options.inputPaths(fs);
        this.maxRecords = options.maxRecords();
        this.maxBytes = options.maxBytes();
        options.startPositions(fs, spans());  // a bad position fails the query's definition
    }

    /** The offset: the next index per log, as JSON the Python source writes too. */
    public static final class LogOffset extends Offset {
        final TreeMap<String, Long> next;

        LogOffset(Map<String, Long> next) {
            this.next = new TreeMap<>(next);
        }

        @Override
        public String json() {
            StringBuilder s = new StringBuilder("{");
            for (Map.Entry<String, Long> e : next.entrySet()) {
                if (s.length() > 1) {
                    s.append(", ");
                }
                try {
                    s.append(new ObjectMapper().writeValueAsString(e.getKey()));
                } catch (java.io.IOException ex) {
                    throw new IllegalStateException(ex);
                }
                s.append(": {\"index\": ").append(e.getValue()).append('}');
            }
            return s.append('}').toString();
        }
    }

    private List<LogSegments.Span> spans() {
        List<LogSegments.Span> out = LogSegments.spans(fs, LogSegments.logsOf(fs, paths));
        fs.close();
        return out;
    }

    private static Map<String, Long> positions(Offset o) {
        return o == null ? new HashMap<>() : ((LogOffset) o).next;
    }

    @Override
    public Offset initialOffset() {
        return new LogOffset(options.startPositions(fs, spans()));
    }

    @Override
    public Offset deserializeOffset(String json) {
        Map<String, Long> out = new TreeMap<>();
        try {
            JsonNode doc = new ObjectMapper().readTree(json);
            var it = doc.fields();
            while (it.hasNext()) {
                var e = it.next();
                out.put(e.getKey(), e.getValue().get("index").asLong());
            }
        } catch (java.io.IOException e) {
            throw new ConfigException(LogOptions.SOURCE + ": offset " + json + " is not {log: {\"index\": n}}");
        }
        return new LogOffset(out);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return maxRecords == null ? ReadLimit.allAvailable() : ReadLimit.maxRows(maxRecords);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        Map<String, Long> t = new HashMap<>();
        for (LogSegments.Span s : spans()) {
            t.put(s.log.name, s.next());
        }
        target = t;
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("latestOffset(start, limit) is the entry point");
    }

    @Override
    public Offset latestOffset(Offset startOffset, ReadLimit limit) {
        Map<String, Long> start = positions(startOffset);
        Map<String, LogSegments.Span> found = new HashMap<>();
        for (LogSegments.Span s : spans()) {
            found.put(s.log.name, s);
        }
        Long budget = limit instanceof ReadMaxRows ? ((ReadMaxRows) limit).maxRows() : null;
        Long byteBudget = maxBytes;
        TreeSet<String> names = new TreeSet<>(found.keySet());
        names.addAll(start.keySet());
        Map<String, Long> out = new TreeMap<>();
        for (String name : names) {
            LogSegments.Span span = found.get(name);
            long first = span == null ? 0 : span.first();
            long nxt = span == null ? 0 : span.next();
            if (target != null) {
                nxt = Math.min(nxt, target.getOrDefault(name, 0L));
            }
            long begin = start.getOrDefault(name, first);
            long newEnd = Math.max(begin, nxt);
            long availFrom = Math.max(begin, first);
            if (byteBudget != null && span != null && newEnd > availFrom) {
                if (byteBudget <= 0) {
                    newEnd = begin;
                } else {
                    long cut = Math.min(newEnd, bytesUpto(span, availFrom, byteBudget));
                    byteBudget -= spanBytes(span, availFrom, cut);
                    newEnd = cut;
                }
            }
            if (budget != null) {
                long take = Math.min(Math.max(0, newEnd - availFrom), budget);
                newEnd = take > 0 ? availFrom + take : begin;
                budget -= take;
            }
            out.put(name, newEnd);
        }
        fs.close();
        return new LogOffset(out);
    }

    @Override
    public Offset reportLatestOffset() {
        Map<String, Long> out = new TreeMap<>();
        for (LogSegments.Span s : spans()) {
            out.put(s.log.name, s.next());
        }
        return new LogOffset(out);
    }

    /** Log offsets of IDX entries [start, stop) (fewer where the file ends): logfiles.entry_offsets. */
    private long[] entryOffsets(LogSegments.Segment seg, long start, long stop) {
        if (start >= stop) {
            return new long[0];
        }
        long n = stop - start;
        byte[] raw = seg.readIdx(fs, LogCodec.HEADER_SIZE + LogCodec.ENTRY_SIZE * start,
            (int) Math.min(Integer.MAX_VALUE - 8, LogCodec.ENTRY_SIZE * n));
        long[] out = new long[raw.length / LogCodec.ENTRY_SIZE];
        for (int i = 0; i < out.length; i++) {
            out[i] = LogCodec.i64(raw, LogCodec.ENTRY_SIZE * i + 16);
        }
        return out;
    }

    /** logsource._bytes_upto: the index past the records from begin whose log bytes fit in budget (at least one). */
    private long bytesUpto(LogSegments.Span span, long begin, long budget) {
        for (LogSegments.Segment seg : span.segments) {
            if (seg.visible() == 0 || seg.stopIndex() <= begin) {
                continue;
            }
            long pos = Math.max(begin - seg.firstIndex, seg.minPos);
            long stop = Math.min(seg.count, pos + budget / LogCodec.RECORD_HEADER_SIZE + 2);
            long[] offsets = entryOffsets(seg, pos, stop);
            long base = offsets[0];
            long fit = 0;
            for (int k = 0; k < offsets.length; k++) {
                long end = k + 1 < offsets.length ? offsets[k + 1] : stop == seg.count ? seg.endOffset : offsets[k];
                if (end - base <= budget) {
                    fit++;
                }
            }
            return seg.firstIndex + pos + Math.max(1, fit);
        }
        return begin;
    }

    /** logsource._span_bytes: log bytes of records [a, b). */
    private long spanBytes(LogSegments.Span span, long a, long b) {
        long total = 0;
        for (LogSegments.Segment seg : span.segments) {
            long lo = Math.max(a, seg.firstIndex + seg.minPos);
            long hi = Math.min(b, seg.stopIndex());
            if (lo >= hi) {
                continue;
            }
            long[] offs = entryOffsets(seg, lo - seg.firstIndex, hi - seg.firstIndex);
            long[] end = entryOffsets(seg, hi - seg.firstIndex, hi - seg.firstIndex + 1);
            total += (end.length > 0 ? end[0] : seg.endOffset) - offs[0];
        }
        return total;
    }

    @Override
    public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
        Map<String, Long> start = positions(startOffset);
        Map<String, Long> end = positions(endOffset);
        Map<String, Long> starts = new HashMap<>();
        Map<String, Long> ends = new HashMap<>();
        for (Map.Entry<String, Long> e : end.entrySet()) {
            long s = start.isEmpty() ? 0 : start.getOrDefault(e.getKey(), 0L);
            if (e.getValue() > s) {
                starts.put(e.getKey(), s);
                ends.put(e.getKey(), e.getValue());
            }
        }
        if (starts.isEmpty()) {
            return new InputPartition[0];
        }
        List<LogSegments.Span> found = new ArrayList<>();
        for (LogSegments.Span s : spans()) {
            if (starts.containsKey(s.log.name)) {
                found.add(s);
            }
        }
        List<LogPlan.Part> parts = LogPlan.plan(fs, found, starts, ends, new LogPlan.Bounds(), options.perPartition, 1,
            null);
        Map<String, Long> covered = new HashMap<>();
        for (LogPlan.Part p : parts) {
            covered.merge(p.logName, p.stop - p.start, Long::sum);
        }
        for (String name : new TreeSet<>(starts.keySet())) {
            long a = starts.get(name);
            long b = ends.get(name);
            long lost = b - a - covered.getOrDefault(name, 0L);
            if (lost <= 0) {
                continue;
            }
            String what = LogOptions.SOURCE + " stream over " + String.join(", ", paths) + ": records " + a + ".." + b
                + " of '" + name + "' were deleted (TTL expiry or truncation) before they were read; " + lost + " lost";
            if (options.failOnDataLoss) {
                throw new ConfigException(what + " (set failOnDataLoss=false to skip them with a warning)");
            }
            LOG.warn("{}", what);
        }
        fs.close();
        // Pushed ranges narrow what is read; the offsets stay the stream's own.
        List<InputPartition> out = new ArrayList<>();
        for (LogPlan.Part p : parts) {
            long[] ab = LogSegments.positionsFor(fs, p.segment, bounds.indexLo, bounds.indexHi, bounds.timeLo, bounds.timeHi);
            long a = Math.max(p.start, ab[0]);
            long z = Math.min(p.stop, ab[1]);
            if (!bounds.empty && a < z) {
                out.add(new LogPlan.Part(p.logName, p.segment, a, z));
            }
        }
        fs.close();
        return out.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new LogSource.Factory(fs, schema, options.mode, options.batchRecords, bounds);
    }

    @Override
    public void commit(Offset end) {
        // Nothing to release: log records stay until the writer's TTL expiry.
    }

    @Override
    public void stop() {
        fs.close();
    }
}
