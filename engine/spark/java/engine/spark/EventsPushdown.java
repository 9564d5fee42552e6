package engine.spark;

import java.util.LinkedHashSet;
import java.util.Set;

import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Which of Spark's V2 predicates an {@code engine-events} read answers itself: {@code
 * persistence_id} equal to or in a list of strings, and {@code sequence_nr} ranges (comparisons
 * with an integer), alone or in an AND.  Both are exact: the partitions hold only the ids asked
 * for, and replay returns exactly the events of the range (it starts at the first one, found by
 * its links, and stops at the last), so Spark is told it need not evaluate them again.
 */
final class EventsPushdown {
    private EventsPushdown() {
    }

    /** Narrows {@code b} by {@code p}; true when {@code b} now answers {@code p} exactly. */
    static boolean apply(Predicate p, EventsPlan.Bounds b) {
        String op = p.name();
        Expression[] ch = p.children();
        if (op.equals("AND") && ch.length == 2 && ch[0] instanceof Predicate && ch[1] instanceof Predicate) {
            boolean left = apply((Predicate) ch[0], b);
            boolean right = apply((Predicate) ch[1], b);
            return left && right;  // a conjunct alone is implied by the whole: narrowing by it stays right
        }
        if (op.equals("IS_NOT_NULL") && ch.length == 1) {
            String c = FilterScanBuilder.column(ch[0]);
            return c != null && EventsSource.fullSchema(false).getFieldIndex(c).isDefined();
        }
        if (op.equals("IN") && ch.length >= 1 && "persistence_id".equals(FilterScanBuilder.column(ch[0]))) {
            Set<String> ids = new LinkedHashSet<>();
            for (int i = 1; i < ch.length; i++) {
                Object v = FilterScanBuilder.literal(ch[i]);
                if (!(v instanceof UTF8String)) {
                    return false;  // a null or another type: left to Spark
                }
                ids.add(v.toString());
            }
            b.onlyIds(ids);
            return true;
        }
        FilterScanBuilder.Comparison cmp = FilterScanBuilder.comparison(p);
        if (cmp == null) {
            return false;
        }
        String col = cmp.column;
        Object v = cmp.value;
        op = cmp.op;
        if (col.equals("persistence_id")) {
            if (!op.equals("=") || !(v instanceof UTF8String)) {
                return false;
            }
            b.onlyIds(Set.of(v.toString()));
            return true;
        }
        Long n = FilterScanBuilder.integer(v);
        if (!col.equals("sequence_nr") || n == null) {
            return false;
        }
        switch (op) {
            case "=":
                b.atLeast(n);
                if (n != Long.MAX_VALUE) {
                    b.below(n + 1);
                }
                return true;
            case ">=":
                b.atLeast(n);
                return true;
            case ">":
                if (n == Long.MAX_VALUE) {
                    b.below(0);
                } else {
                    b.atLeast(n + 1);
                }
                return true;
            case "<":
                b.below(n);
                return true;
            case "<=":
                if (n != Long.MAX_VALUE) {
                    b.below(n + 1);
                }
                return true;
            default:
                return false;
        }
    }
}
