package engine.spark;

import java.util.ArrayList;
import java.util.List;

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
}
