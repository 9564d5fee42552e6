package engine.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.OptionalLong;

import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * What every source of the connector builds its scans from: its schema (the columns, nullable
 * and with {@code _corrupt_record} in PERMISSIVE mode), the pruned read schema and the
 * statistics it reports.  One copy, so that the sources agree.
 */
final class ScanParts {
    /** PERMISSIVE mode's column of the raw text of a damaged record. */
    static final String CORRUPT = "_corrupt_record";

    private ScanParts() {
    }

    /** A source's schema: {@code columns} (name, type, nullable when PERMISSIVE or given nullable). */
    static StructType schema(boolean permissive, StructField... columns) {
        List<StructField> f = new ArrayList<>();
        for (StructField c : columns) {
            f.add(permissive && !c.nullable() ? new StructField(c.name(), c.dataType(), true, c.metadata()) : c);
        }
        if (permissive) {
            f.add(new StructField(CORRUPT, org.apache.spark.sql.types.DataTypes.StringType, true, Metadata.empty()));
        }
        return new StructType(f.toArray(new StructField[0]));
    }

    /** The columns of {@code schema} Spark asks for ({@code required}), and in PERMISSIVE mode
     * the corrupt-record column: it reports damage whatever is selected. */
    static StructType prune(StructType schema, StructType required, boolean permissive) {
        List<StructField> keep = new ArrayList<>();
        List<String> names = List.of(required.fieldNames());
        for (StructField f : schema.fields()) {
            if (names.contains(f.name()) || (f.name().equals(CORRUPT) && permissive)) {
                keep.add(f);
            }
        }
        return new StructType(keep.toArray(new StructField[0]));
    }

    /** Statistics of {@code bytes} (at least 1) and {@code rows} (null: not known). */
    static Statistics statistics(long bytes, Long rows) {
        final long b = Math.max(1, bytes);
        return new Statistics() {
            @Override
            public OptionalLong sizeInBytes() {
                return OptionalLong.of(b);
            }

            @Override
            public OptionalLong numRows() {
                return rows == null ? OptionalLong.empty() : OptionalLong.of(rows);
            }
        };
    }
}
