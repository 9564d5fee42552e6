package engine.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.TreeSet;

import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.types.StructField;

/**
 * Which of Spark's V2 predicates an {@code engine-queue} read answers itself: comparisons of
 * {@code id} with an integer, {@code id IN (integers)}, alone or in an {@code AND}, and {@code IS
 * NOT NULL} of a column that is never null.  They narrow the ids every partition reads ({@link
 * QueuePlan.Part#within}): partitions holding none are not planned, journal files whose ids (known
 * from their first ids, which the plan reads and checks) are all outside are not opened, and rows
 * outside are dropped as the batches are filled, so the answer is exact and Spark is told it need
 * not evaluate them again (except in PERMISSIVE mode, {@link FilterScanBuilder}).  Anything else
 * ({@code OR}, {@code NOT}, other columns) is left to Spark.
 */
final class QueuePushdown {
    private QueuePushdown() {
    }

    /** The ids the pushed filters let through: {@code [lo, hi]} and, when not null, the sorted {@code ids}. */
    static final class Bounds implements Serializable {
        private static final long serialVersionUID = 1L;
        /** Item ids are positive (a reader fails a journal whose first id is not above 0): 1, not below. */
        long lo = 1;
        long hi = Long.MAX_VALUE;
        /** Sorted, distinct; null: every id of the range. */
        long[] ids;

        /** Narrowed to {@code [a, b]}. */
        void range(long a, long b) {
            lo = Math.max(lo, a);
            hi = Math.min(hi, b);
        }

        /** Narrowed to the sorted, distinct {@code set}. */
        void onlyIds(long[] set) {
            if (ids == null) {
                ids = set;
                return;
            }
            TreeSet<Long> both = new TreeSet<>();
            for (long x : set) {
                if (Arrays.binarySearch(ids, x) >= 0) {
                    both.add(x);
                }
            }
            ids = both.stream().mapToLong(Long::longValue).toArray();
        }

        /** Whether no id gets through (nothing needs reading). */
        boolean none() {
            if (lo > hi) {
                return true;
            }
            if (ids == null) {
                return false;
            }
            for (long x : ids) {
                if (x >= lo && x <= hi) {
                    return false;
                }
            }
            return true;
        }

        /** The lowest id let through (an estimate's end: {@link #none} tells whether there is one). */
        long first() {
            return ids == null ? lo : Math.max(lo, ids[0]);
        }

        /** The highest id let through (as {@link #first}). */
        long last() {
            return ids == null ? hi : Math.min(hi, ids[ids.length - 1]);
        }

        /** Whether any filter narrowed the ids (a read of every id otherwise). */
        boolean narrowed() {
            return lo > 1 || hi < Long.MAX_VALUE || ids != null;
        }
    }

    /** Narrows {@code b} by {@code p}; true when {@code b} now answers {@code p} exactly. */
    static boolean apply(Predicate p, Bounds b) {
        String op = p.name();
        Expression[] ch = p.children();
        if (op.equals("AND") && ch.length == 2 && ch[0] instanceof Predicate && ch[1] instanceof Predicate) {
            boolean left = apply((Predicate) ch[0], b);
            boolean right = apply((Predicate) ch[1], b);
            return left && right;  // a conjunct alone is implied by the whole: narrowing by it stays right
        }
        if (op.equals("IS_NOT_NULL") && ch.length == 1) {
            // Exact for the columns that are never null (expire_time is null for items that never expire).
            String c = FilterScanBuilder.column(ch[0]);
            if (c == null) {
                return false;
            }
            for (StructField f : QueueSource.fullSchema(false).fields()) {
                if (f.name().equals(c)) {
                    return !f.nullable();
                }
            }
            return false;
        }
        if (op.equals("IN") && ch.length >= 1 && "id".equals(FilterScanBuilder.column(ch[0]))) {
            TreeSet<Long> set = new TreeSet<>();
            for (int i = 1; i < ch.length; i++) {
                Long v = FilterScanBuilder.integer(ch[i]);
                if (v == null) {
                    return false;  // a null or another type: left to Spark, nothing narrowed
                }
                set.add(v);
            }
            b.onlyIds(set.stream().mapToLong(Long::longValue).toArray());
            return true;
        }
        long[] r = FilterScanBuilder.integerRange(p, "id");
        if (r == null) {
            return false;
        }
        b.range(r[0], r[1]);
        return true;
    }
}
