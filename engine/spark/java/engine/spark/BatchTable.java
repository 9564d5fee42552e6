package engine.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import java.util.function.BiFunction;
import java.util.function.Function;
import java.util.function.Predicate;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The table of a read-only source of the connector (engine-events, engine-queue, ...): the
 * source's schema, or the one the user gave ({@link LogSource#userSchema}), and a scan builder
 * per read.  One copy of the DataSource V2 plumbing; a source names its parts.
 */
final class BatchTable implements Table, SupportsRead {
    private final String source;
    private final StructType given;
    private final Map<String, String> properties;
    private final Predicate<Map<String, String>> permissive;
    private final Function<Boolean, StructType> fullSchema;
    private final BiFunction<StructType, Map<String, String>, ScanBuilder> builder;
    private final Set<TableCapability> capabilities;

    /**
     * @param permissive whether options (checked on the way) ask for PERMISSIVE
     * @param fullSchema the source's schema, PERMISSIVE or not
     * @param builder a scan builder for the read schema and a read's options
     */
    BatchTable(String source, StructType given, Map<String, String> properties,
               Predicate<Map<String, String>> permissive, Function<Boolean, StructType> fullSchema,
               BiFunction<StructType, Map<String, String>, ScanBuilder> builder) {
        this(source, given, properties, permissive, fullSchema, builder, EnumSet.of(TableCapability.BATCH_READ));
    }

    /** As above, for a source whose scans also stream ({@code capabilities}: what it reads). */
    BatchTable(String source, StructType given, Map<String, String> properties,
               Predicate<Map<String, String>> permissive, Function<Boolean, StructType> fullSchema,
               BiFunction<StructType, Map<String, String>, ScanBuilder> builder, Set<TableCapability> capabilities) {
        this.capabilities = capabilities;
        this.source = source;
        this.given = given;
        this.properties = properties;
        this.permissive = permissive;
        this.fullSchema = fullSchema;
        this.builder = builder;
    }

    private StructType readSchema() {
        boolean p = permissive.test(properties);
        return LogSource.userSchema(source, fullSchema.apply(p), given, p);
    }

    @Override
    public String name() {
        return source;
    }

    @Override
    public StructType schema() {
        return readSchema();
    }

    @Override
    public Set<TableCapability> capabilities() {
        return capabilities;
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return builder.apply(readSchema(), options.asCaseSensitiveMap());
    }
}
