package engine.spark;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * File access through Hadoop's {@link FileSystem} API, so any file system the cluster is
 * configured for works.  Paths stay the strings the user gave (absolute; a scheme only if
 * the user wrote one), so error messages name files exactly as the Python readers do.
 * Serializable: the driver's Hadoop configuration travels to the executors as bytes.
 */
public final class Hfs implements Serializable {
    private static final long serialVersionUID = 1L;
    private final byte[] confBytes;
    private transient Configuration conf;
    private transient Map<String, FSDataInputStream> open;

    public Hfs(Configuration conf) {
        this.conf = conf;
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (DataOutputStream data = new DataOutputStream(out)) {
            conf.write(data);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        this.confBytes = out.toByteArray();
    }

    private Hfs(byte[] confBytes) {
        this.confBytes = confBytes;
    }

    /** A new instance with the same configuration and no open streams (one per task: not thread-safe). */
    public Hfs fresh() {
        return new Hfs(confBytes);
    }

    private Configuration conf() {
        if (conf == null) {
            Configuration c = new Configuration(false);
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(confBytes))) {
                c.readFields(in);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            conf = c;
        }
        return conf;
    }

    private FileSystem fs(Path p) {
        try {
            FileSystem fs = p.getFileSystem(conf());
            // Hadoop's local file system checks its own ".name.crc" side files, which
            // engine's files do not have; reading through the raw one skips that layer.
            return fs instanceof org.apache.hadoop.fs.LocalFileSystem ? ((org.apache.hadoop.fs.LocalFileSystem) fs).getRaw() : fs;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The local file {@code path} names when its file system is the local one, else null. */
    public java.nio.file.Path localPath(String path) {
        Path p = new Path(path);
        if (!(fs(p) instanceof org.apache.hadoop.fs.RawLocalFileSystem)) {
            return null;
        }
        return java.nio.file.Paths.get(p.toUri().getPath());
    }

    public static String join(String dir, String name) {
        return (dir.endsWith("/") ? dir.substring(0, dir.length() - 1) : dir) + "/" + name;
    }

    /** The file's size, or -1 when there is no such file. */
    public long size(String path) {
        Path p = new Path(path);
        try {
            FileStatus st = fs(p).getFileStatus(p);
            return st.isDirectory() ? -1 : st.getLen();
        } catch (FileNotFoundException e) {
            return -1;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public boolean exists(String path) {
        Path p = new Path(path);
        try {
            return fs(p).exists(p);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public boolean isDir(String path) {
        Path p = new Path(path);
        try {
            return fs(p).getFileStatus(p).isDirectory();
        } catch (FileNotFoundException e) {
            return false;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The names in a directory (unsorted). */
    public List<String> list(String dir) {
        Path p = new Path(dir);
        List<String> out = new ArrayList<>();
        try {
            for (FileStatus st : fs(p).listStatus(p)) {
                out.add(st.getPath().getName());
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out;
    }

    /** The paths a glob pattern names (absolute, scheme as given). */
    public List<String> glob(String pattern) {
        Path p = new Path(pattern);
        List<String> out = new ArrayList<>();
        try {
            FileStatus[] found = fs(p).globStatus(p);
            if (found != null) {
                for (FileStatus st : found) {
                    String path = st.getPath().toUri().getPath();
                    String name = st.getPath().getName();
                    if (name.startsWith(".") || name.startsWith("_")) {
                        continue;
                    }
                    out.add(pattern.contains(":") ? st.getPath().toString() : path);
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out;
    }

    private FSDataInputStream stream(String path) throws IOException {
        if (open == null) {
            open = new HashMap<>();
        }
        FSDataInputStream in = open.get(path);
        if (in == null) {
            Path p = new Path(path);
            in = fs(p).open(p);
            open.put(path, in);
        }
        return in;
    }

    /**
     * Up to {@code len} bytes at {@code offset} (fewer where the file ends; the Python
     * {@code FileHandle.read_at}).  Streams stay open until {@link #close()}.
     */
    public byte[] readAt(String path, long offset, int len) {
        try {
            long size = size(path);
            if (size < 0) {
                throw new FileNotFoundException(path);
            }
            int n = (int) Math.max(0, Math.min((long) len, size - offset));
            byte[] out = new byte[n];
            if (n > 0) {
                stream(path).readFully(offset, out, 0, n);
            }
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Reads into {@code out} from {@code offset}; returns how many bytes the file had there. */
    public int readInto(String path, long offset, byte[] out, int len, long fileSize) {
        int n = (int) Math.max(0, Math.min((long) len, fileSize - offset));
        try {
            if (n > 0) {
                stream(path).readFully(offset, out, 0, n);
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return n;
    }

    public byte[] readAll(String path) {
        long size = size(path);
        return readAt(path, 0, (int) Math.max(0, size));
    }

    /** Closes every stream opened by reads. */
    public void close() {
        if (open == null) {
            return;
        }
        for (FSDataInputStream in : open.values()) {
            try {
                in.close();
            } catch (IOException e) {
                // closing a read stream: nothing was written, nothing to lose
            }
        }
        open.clear();
    }
}
