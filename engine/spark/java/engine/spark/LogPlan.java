package engine.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.connector.read.InputPartition;

/** Planning {@code engine-log} partitions: the JVM twin of {@code logplan.plan}, plus pushed ranges and limit. */
public final class LogPlan {
    private LogPlan() {
    }

    /** What a scan keeps of each log: index range [indexLo, indexHi) and time range [timeLo, timeHi) in ns. */
    public static final class Bounds implements Serializable {
        private static final long serialVersionUID = 1L;
        public Long indexLo;
        public Long indexHi;
        public Long timeLo;
        public Long timeHi;
        /** Nothing can match (a contradiction such as index < 0). */
        public boolean empty;

        public boolean any() {
            return indexLo != null || indexHi != null || timeLo != null || timeHi != null || empty;
        }

        void lowIndex(long v) {
            indexLo = indexLo == null ? v : Math.max(indexLo, v);
        }

        void highIndex(long v) {
            indexHi = indexHi == null ? v : Math.min(indexHi, v);
        }

        void lowTime(long v) {
            timeLo = timeLo == null ? v : Math.max(timeLo, v);
        }

        void highTime(long v) {
            timeHi = timeHi == null ? v : Math.min(timeHi, v);
        }

        boolean keepsTime(long t) {
            return (timeLo == null || t >= timeLo) && (timeHi == null || t < timeHi);
        }
    }

    /** Positions [start, stop) of one segment of one log. */
    public static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        public final String logName;
        public final LogSegments.Segment segment;
        public final long start;
        public final long stop;

        public Part(String logName, LogSegments.Segment segment, long start, long stop) {
            this.logName = logName;
            this.segment = segment;
            this.start = start;
            this.stop = stop;
        }
    }

    /**
     * Partitions covering each log's records from {@code starts} to {@code ends} inside
     * {@code bounds}, at most {@code limit} records in all (null: no limit): one range per
     * segment, split by {@code perPartition} records and further until there are at least
     * {@code minPartitions}.
     */
    public static List<Part> plan(Hfs fs, List<LogSegments.Span> found, Map<String, Long> starts, Map<String, Long> ends,
                                  Bounds bounds, long perPartition, long minPartitions, Integer limit) {
        List<Part> ranges = new ArrayList<>();
        long left = limit == null ? Long.MAX_VALUE : limit;
        if (bounds.empty) {
            return ranges;
        }
        for (LogSegments.Span s : found) {
            if (!starts.containsKey(s.log.name)) {
                continue;
            }
            long lo = starts.get(s.log.name);
            long hi = ends.get(s.log.name);
            for (LogSegments.Segment seg : s.segments) {
                if (seg.visible() == 0 || left <= 0) {
                    continue;
                }
                Long iLo = bounds.indexLo == null ? lo : Math.max(lo, bounds.indexLo);
                Long iHi = bounds.indexHi == null ? hi : Math.min(hi, bounds.indexHi);
                long[] ab = LogSegments.positionsFor(fs, seg, iLo, iHi, bounds.timeLo, bounds.timeHi);
                long a = ab[0];
                long b = ab[1] - a > left ? a + left : ab[1];
                if (a < b) {
                    ranges.add(new Part(s.log.name, seg, a, b));
                    left -= b - a;
                }
            }
        }
        long total = 0;
        for (Part p : ranges) {
            total += p.stop - p.start;
        }
        long per = perPartition;
        if (minPartitions > 1 && total > 0) {
            per = Math.max(1, Math.min(per, (total + minPartitions - 1) / minPartitions));
        }
        List<Part> out = new ArrayList<>();
        for (Part r : ranges) {
            long a = r.start;
            while (a < r.stop) {
                long end = Math.min(r.stop, a + per);
                out.add(new Part(r.logName, r.segment, a, end));
                a = end;
            }
        }
        return out;
    }
}
