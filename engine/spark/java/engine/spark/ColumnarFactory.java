package engine.spark;

import java.io.Serializable;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The partition reader factory of a source that reads columnar batches only (every source
 * but the log's, which also answers pushed-down aggregates as rows): it travels to the
 * executors with the read schema, the {@code mode} and how the source opens a partition,
 * and gives each task its own file system handle ({@link Hfs#fresh}: not thread-safe).
 */
final class ColumnarFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    /** How a source opens one of its partitions (a serializable lambda: it is sent with the factory). */
    interface Open extends Serializable {
        PartitionReader<ColumnarBatch> open(Hfs fs, InputPartition partition, StructType schema, String mode);
    }

    private final String source;
    private final Hfs fs;
    private final StructType schema;
    private final String mode;
    private final Open open;

    ColumnarFactory(String source, Hfs fs, StructType schema, String mode, Open open) {
        this.source = source;
        this.fs = fs;
        this.schema = schema;
        this.mode = mode;
        this.open = open;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return true;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        return open.open(fs.fresh(), partition, schema, mode);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        throw new UnsupportedOperationException(source + " reads columnar batches only");
    }
}
