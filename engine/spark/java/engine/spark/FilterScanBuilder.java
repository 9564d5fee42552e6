package engine.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.types.StructType;

/**
 * What the sources' scan builders share: column pruning, and the pushdown of the filters a
 * source answers from its files' metadata ({@link #answers}), which Spark is then told not to
 * evaluate again, except in PERMISSIVE mode, where a damaged row holds nulls and Spark must
 * check every filter itself.  A source adds its own pushdowns (aggregates, limits) and
 * {@link #build}.
 *
 * @param <B> the source's bounds, narrowed by each filter it takes
 */
abstract class FilterScanBuilder<B> implements ScanBuilder, SupportsPushDownRequiredColumns,
    SupportsPushDownV2Filters {
    /** What the filters taken so far allow. */
    protected final B bounds;
    /** The columns read: the table's, pruned to what the query uses. */
    protected StructType schema;
    /** The filters taken, as Spark asks for them back. */
    protected Predicate[] pushed = new Predicate[0];
    private final boolean permissive;

    FilterScanBuilder(StructType schema, boolean permissive, B bounds) {
        this.schema = schema;
        this.permissive = permissive;
        this.bounds = bounds;
    }

    /** Narrow {@code bounds} by {@code p} if the source can; whether it answers {@code p} exactly. */
    protected abstract boolean answers(Predicate p, B bounds);

    @Override
    public void pruneColumns(StructType required) {
        schema = ScanParts.prune(schema, required, permissive);
    }

    @Override
    public Predicate[] pushPredicates(Predicate[] predicates) {
        List<Predicate> used = new ArrayList<>();
        List<Predicate> after = new ArrayList<>();
        for (Predicate p : predicates) {
            boolean taken = answers(p, bounds);
            if (taken) {
                used.add(p);
            }
            // PERMISSIVE rows may hold nulls: Spark evaluates every filter again there.
            if (!taken || permissive) {
                after.add(p);
            }
        }
        pushed = used.toArray(new Predicate[0]);
        return after.toArray(new Predicate[0]);
    }

    @Override
    public Predicate[] pushedPredicates() {
        return pushed;
    }

    /** The top-level column {@code e} names (null: {@code e} is no such column). */
    static String column(Expression e) {
        if (e instanceof NamedReference) {
            String[] names = ((NamedReference) e).fieldNames();
            return names.length == 1 ? names[0] : null;
        }
        return null;
    }

    /** The value of {@code e} when it is a literal (null: anything else, a null literal too). */
    static Object literal(Expression e) {
        return e instanceof Literal ? ((Literal<?>) e).value() : null;
    }

    /** {@code v} as a long when it is an integer value (null: anything else). */
    static Long integer(Object v) {
        if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
            return ((Number) v).longValue();
        }
        return null;
    }

    /** The value of {@code e} when it is an integer literal (null: anything else, a null literal too). */
    static Long integer(Expression e) {
        return integer(literal(e));
    }

    /**
     * A comparison of a top-level column with a non-null literal, as Spark hands it to a
     * source: {@code column op value} with the column on the left (the operands swapped and
     * the operator turned round when Spark wrote {@code value op column}), {@code <=>} given
     * as {@code =} (the literal is not null, so they agree).
     */
    static final class Comparison {
        final String column;
        final String op;
        final Object value;

        private Comparison(String column, String op, Object value) {
            this.column = column;
            this.op = op;
            this.value = value;
        }
    }

    /** {@code p} as a {@link Comparison}; null when it is no comparison of a column with a literal. */
    static Comparison comparison(Predicate p) {
        Expression[] ch = p.children();
        if (ch.length != 2) {
            return null;
        }
        String op = p.name();
        String col = column(ch[0]);
        Object v = literal(ch[1]);
        if (col == null || v == null) {
            col = column(ch[1]);
            v = literal(ch[0]);
            op = flip(op);
        }
        if (col == null || v == null) {
            return null;
        }
        return new Comparison(col, op.equals("<=>") ? "=" : op, v);
    }

    /**
     * A comparison of column {@code col} with an integer ({@code =}, {@code <=>}, {@code <},
     * {@code <=}, {@code >}, {@code >=}, the column on either side) as the inclusive range
     * {@code [lo, hi]} of the values it lets through ({@code lo > hi}: none); null when {@code p}
     * is no such comparison.  Inclusive ends, so that no comparison with {@code Long.MIN_VALUE}
     * or {@code Long.MAX_VALUE} overflows.  ({@code <=>} is {@code =}: the literal is not null.)
     */
    static long[] integerRange(Predicate p, String col) {
        Comparison c = comparison(p);
        Long v = c == null || !col.equals(c.column) ? null : integer(c.value);
        if (v == null) {
            return null;
        }
        long n = v;
        switch (c.op) {
            case "=":
                return new long[] {n, n};
            case ">=":
                return new long[] {n, Long.MAX_VALUE};
            case ">":
                return n == Long.MAX_VALUE ? new long[] {1, 0} : new long[] {n + 1, Long.MAX_VALUE};
            case "<=":
                return new long[] {Long.MIN_VALUE, n};
            case "<":
                return n == Long.MIN_VALUE ? new long[] {1, 0} : new long[] {Long.MIN_VALUE, n - 1};
            default:
                return null;
        }
    }

    /** {@code a op b} as {@code b op' a}. */
    private static String flip(String op) {
        switch (op) {
            case "<": return ">";
            case "<=": return ">=";
            case ">": return "<";
            case ">=": return "<=";
            default: return op;
        }
    }
}
