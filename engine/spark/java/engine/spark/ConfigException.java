package engine.spark;

/** The JVM twin of {@code engine.errors.ConfigError}: a bad option, path or schema. */
public class ConfigException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public ConfigException(String message) {
        super(message);
    }
}
