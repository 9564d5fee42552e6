package engine.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * What of a query the IDX files answer: index and time ranges (from Spark's V2 predicates)
 * and COUNT / MIN / MAX of index and time.
 *
 * <p>Index ranges are exact (indexes are dense and every record read is checked against
 * its entry's index).  Time ranges are found by a binary search over the IDX (times never
 * go down) and every row read is checked against the range too, so a pushed predicate is
 * answered exactly and Spark is told it need not evaluate it again.
 */
public final class LogPushdown {
    private LogPushdown() {
    }

    /** Narrows {@code b} by {@code p}; true when {@code b} now answers {@code p} exactly. */
    public static boolean apply(Predicate p, LogPlan.Bounds b) {
        String op = p.name();
        Expression[] ch = p.children();
        if (op.equals("AND") && ch.length == 2 && ch[0] instanceof Predicate && ch[1] instanceof Predicate) {
            boolean left = apply((Predicate) ch[0], b);
            boolean right = apply((Predicate) ch[1], b);
            return left && right;  // a conjunct taken alone is implied by the whole: narrowing by it stays right
        }
        if (op.equals("IS_NOT_NULL") && ch.length == 1) {
            String c = FilterScanBuilder.column(ch[0]);
            return c != null && LogSource.fullSchema(false).getFieldIndex(c).isDefined();
        }
        FilterScanBuilder.Comparison cmp = FilterScanBuilder.comparison(p);
        Long v = cmp == null ? null : FilterScanBuilder.integer(cmp.value);
        if (v == null) {
            return false;
        }
        String col = cmp.column;
        op = cmp.op;
        long scale;
        switch (col) {
            case "index":
            case "time_ns":
                scale = 1;
                break;
            case "time":
                scale = 1000;  // microseconds; the files hold nanoseconds
                break;
            default:
                return false;
        }
        // The range [lo, hi) in the column's unit, then in nanoseconds for time.
        Long lo = null;
        Long hi = null;
        switch (op) {
            case "=": lo = v; hi = v == Long.MAX_VALUE ? null : v + 1; break;
            case ">=": lo = v; break;
            case ">": if (v == Long.MAX_VALUE) { b.empty = true; return true; } lo = v + 1; break;
            case "<": hi = v; break;
            case "<=": hi = v == Long.MAX_VALUE ? null : v + 1; break;
            default: return false;
        }
        try {
            if (lo != null) {
                lo = Math.multiplyExact(lo, scale);
            }
            if (hi != null) {
                hi = Math.multiplyExact(hi, scale);
            }
        } catch (ArithmeticException e) {
            return false;
        }
        if (col.equals("index")) {
            if (lo != null) {
                b.lowIndex(lo);
            }
            if (hi != null) {
                b.highIndex(hi);
            }
        } else {
            if (lo != null) {
                b.lowTime(lo);
            }
            if (hi != null) {
                b.highTime(hi);
            }
        }
        if (b.indexHi != null && b.indexHi <= 0 || b.indexLo != null && b.indexHi != null && b.indexLo >= b.indexHi
            || b.timeLo != null && b.timeHi != null && b.timeLo >= b.timeHi) {
            b.empty = true;
        }
        return true;
    }

    /** The one-row answer of pushed aggregates. */
    public static final class Answer implements InputPartition {
        private static final long serialVersionUID = 1L;
        public final Object[] values;

        Answer(Object[] values) {
            this.values = values;
        }
    }

    /** COUNT(*), COUNT(column), MIN/MAX of index, time, time_ns, with no GROUP BY. */
    public static final class Aggregates {
        private final List<String> kinds = new ArrayList<>();
        private final List<String> columns = new ArrayList<>();

        static Aggregates of(Aggregation a) {
            if (a.groupByExpressions().length != 0) {
                return null;
            }
            Aggregates out = new Aggregates();
            for (AggregateFunc f : a.aggregateExpressions()) {
                if (f instanceof CountStar) {
                    out.kinds.add("count");
                    out.columns.add(null);
                } else if (f instanceof Count && !((Count) f).isDistinct() && FilterScanBuilder.column(((Count) f).column()) != null
                    && LogSource.fullSchema(false).getFieldIndex(FilterScanBuilder.column(((Count) f).column())).isDefined()) {
                    out.kinds.add("count");
                    out.columns.add(null);
                } else if (f instanceof Min || f instanceof Max) {
                    String c = FilterScanBuilder.column(f instanceof Min ? ((Min) f).column() : ((Max) f).column());
                    if (!"index".equals(c) && !"time".equals(c) && !"time_ns".equals(c)) {
                        return null;
                    }
                    out.kinds.add(f instanceof Min ? "min" : "max");
                    out.columns.add(c);
                } else {
                    return null;
                }
            }
            return out;
        }

        StructType schema() {
            StructField[] f = new StructField[kinds.size()];
            for (int i = 0; i < f.length; i++) {
                String c = columns.get(i);
                DataType t = "time".equals(c) ? DataTypes.TimestampType : DataTypes.LongType;
                f[i] = new StructField("agg_" + i + "_" + kinds.get(i) + (c == null ? "" : "_" + c), t,
                    c != null, Metadata.empty());
            }
            return new StructType(f);
        }

        /** The values from the plan's ranges and the IDX entries at their ends. */
        Answer answer(Hfs fs, List<LogPlan.Part> parts) {
            long count = 0;
            Long minIndex = null;
            Long maxIndex = null;
            Long minTime = null;
            Long maxTime = null;
            boolean times = columns.contains("time") || columns.contains("time_ns");
            for (LogPlan.Part p : parts) {
                count += p.stop - p.start;
                long a = p.segment.firstIndex + p.start;
                long z = p.segment.firstIndex + p.stop - 1;
                minIndex = minIndex == null ? a : Math.min(minIndex, a);
                maxIndex = maxIndex == null ? z : Math.max(maxIndex, z);
                if (times) {
                    long ta = LogSegments.entryAt(fs, p.segment, p.start)[0];
                    long tz = LogSegments.entryAt(fs, p.segment, p.stop - 1)[0];
                    minTime = minTime == null ? ta : Math.min(minTime, ta);
                    maxTime = maxTime == null ? tz : Math.max(maxTime, tz);
                }
            }
            fs.close();
            Object[] values = new Object[kinds.size()];
            for (int i = 0; i < values.length; i++) {
                String k = kinds.get(i);
                String c = columns.get(i);
                if (k.equals("count")) {
                    values[i] = count;
                } else if (c.equals("index")) {
                    values[i] = k.equals("min") ? minIndex : maxIndex;
                } else {
                    Long t = k.equals("min") ? minTime : maxTime;
                    values[i] = t == null ? null : c.equals("time") ? (Object) Math.floorDiv(t, 1000L) : t;
                }
            }
            return new Answer(values);
        }

        @Override
        public String toString() {
            List<String> out = new ArrayList<>();
            for (int i = 0; i < kinds.size(); i++) {
                out.add(kinds.get(i) + "(" + (columns.get(i) == null ? "*" : columns.get(i)) + ")");
            }
            return String.join(", ", out);
        }
    }
}
