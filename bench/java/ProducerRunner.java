// The Java KafkaProducer as a peer in the benchmark harness (bench/harness.py).
//
// bench/runners/java_send.py compiles this file once against the kafka-clients jar of the
// test suite's Kafka jars (~/.cache/aioproducer/kafka-<version>), writes the run's payloads
// to a file, and replaces itself with
//
//   java -cp <kafka-clients and its compression jars>:<classes> ProducerRunner \
//       key=value ... payloads=<file>
//
// where the keys are the fields of bench/runners/_common.py's RunSpec. Like every runner it
// sends `warmup` records and waits for them before the clock starts, then measures either
// throughput (`records` records as fast as send() takes them, from the first send to the
// last acknowledgement) or latency (`rate` records per second for `duration` seconds, each
// record's latency its acknowledgement time minus the time send() was called). Outcomes
// are counted in the send callback. It prints one JSON object on one line of stdout, with
// the fields the Python runners print (bench/runners/_common.py's result()); everything
// else goes to stderr.

import java.io.DataInputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ProducerRunner {
    /** Distinct keys of the keyed scenarios (bench/runners/_common.py's KEY_COUNT). */
    private static final int KEY_COUNT = 10_000;
    /** The shortest idle between paced sends (MIN_TICK). */
    private static final long MIN_TICK_NANOS = 1_000_000L;
    private static final int MAX_ERROR_SAMPLES = 5;

    private ProducerRunner() {}

    /** Acknowledgements and failures, counted in the callback (the producer's I/O thread). */
    static final class Outcomes implements Callback {
        // Callbacks run on the producer's I/O thread, but send() completes a record it
        // refuses on the caller's thread.
        final AtomicLong acked = new AtomicLong();
        final AtomicLong failed = new AtomicLong();
        final List<String> samples = new ArrayList<>();

        @Override
        public void onCompletion(RecordMetadata metadata, Exception exception) {
            if (exception == null) {
                acked.incrementAndGet();
            } else {
                fail(exception);
            }
        }

        void fail(Exception exception) {
            failed.incrementAndGet();
            synchronized (samples) {
                if (samples.size() < MAX_ERROR_SAMPLES) {
                    samples.add(String.valueOf(exception));
                }
            }
        }

        void reset() {
            acked.set(0);
            failed.set(0);
            synchronized (samples) {
                samples.clear();
            }
        }
    }

    /** Wall clock, process CPU and peak RSS of the measured part. */
    static final class Meter {
        long wallStart;
        long wallStop;
        long cpuStart;
        long cpuStop;
        long sentAt;
        long rssBefore;

        void start() {
            rssBefore = peakRssBytes();
            cpuStart = processCpuNanos();
            wallStart = System.nanoTime();
        }

        void stop() {
            wallStop = System.nanoTime();
            cpuStop = processCpuNanos();
        }

        double seconds() {
            return (wallStop - wallStart) / 1e9;
        }

        double cpu() {
            return (cpuStop - cpuStart) / 1e9;
        }
    }

    public static void main(String[] args) throws Exception {
        // The JSON line goes to the real stdout; System.out becomes stderr first, so nothing
        // a library prints can mix with it.
        PrintStream results = new PrintStream(
                new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        Map<String, String> spec = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq <= 0) {
                System.err.println("usage: ProducerRunner key=value ... (got " + arg + ")");
                System.exit(2);
            }
            spec.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        String out;
        int status = 0;
        try {
            out = run(spec);
        } catch (Throwable error) {
            error.printStackTrace();
            long timed = timedRecords(spec);
            out = "{" + field("client", spec.get("client")) + ","
                    + field("scenario", spec.get("scenario")) + ","
                    + field("mode", spec.get("mode")) + ",\"records\":" + timed
                    + ",\"acked\":0,\"errors\":" + timed + ",\"error_samples\":["
                    + quote(String.valueOf(error)) + "],\"fatal\":true}";
            status = 1;
        }
        results.println(out);
        results.flush();
        // The producer's threads are gone (close() returned); exit at once all the same.
        System.exit(status);
    }

    static long timedRecords(Map<String, String> spec) {
        if ("latency".equals(spec.get("mode"))) {
            double rate = Double.parseDouble(spec.getOrDefault("rate", "20000"));
            double duration = Double.parseDouble(spec.getOrDefault("duration", "5"));
            return Math.max(1, Math.round(rate * duration));
        }
        return Long.parseLong(spec.getOrDefault("records", "100000"));
    }

    static String run(Map<String, String> spec) throws Exception {
        String topic = spec.get("topic");
        int warmup = Integer.parseInt(spec.getOrDefault("warmup", "1000"));
        boolean keyed = Boolean.parseBoolean(spec.getOrDefault("keyed", "false"));
        byte[][] values = readPayloads(Path.of(spec.get("payloads")));
        byte[][] keys = keyed ? makeKeys() : null;

        Properties config = new Properties();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.get("bootstrap_servers"));
        String acks = spec.getOrDefault("acks", "1");
        config.put(ProducerConfig.ACKS_CONFIG, acks.equals("-1") ? "all" : acks);
        // Java takes whole milliseconds, as aioproducer does.
        config.put(ProducerConfig.LINGER_MS_CONFIG,
                String.valueOf(Math.round(Double.parseDouble(spec.getOrDefault("linger_ms", "5")))));
        config.put(ProducerConfig.BATCH_SIZE_CONFIG, spec.getOrDefault("batch_size", "16384"));
        config.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, spec.getOrDefault("compression", "none"));
        config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, spec.getOrDefault("idempotence", "false"));
        config.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        Outcomes outcomes = new Outcomes();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
            for (int i = 0; i < warmup; i++) {
                producer.send(record(topic, values, keys, i), outcomes);
            }
            producer.flush();
            if (outcomes.failed.get() > 0) {
                throw new IllegalStateException("the warm-up failed: " + outcomes.samples);
            }
            outcomes.reset();
            if ("latency".equals(spec.get("mode"))) {
                return latency(spec, producer, topic, values, keys);
            }
            long records = Long.parseLong(spec.getOrDefault("records", "100000"));
            Meter meter = new Meter();
            meter.start();
            for (long i = 0; i < records; i++) {
                producer.send(record(topic, values, keys, i), outcomes);
            }
            producer.flush();
            meter.stop();
            return result(spec, meter, records, outcomes.acked.get(), outcomes.failed.get(),
                    outcomes.samples,
                    null);
        }
    }

    static ProducerRecord<byte[], byte[]> record(String topic, byte[][] values, byte[][] keys,
                                                 long index) {
        byte[] key = keys == null ? null : keys[(int) (index % keys.length)];
        return new ProducerRecord<>(topic, key, values[(int) (index % values.length)]);
    }

    /** The paced run: records due at start + i / rate, sent in ticks of at least 1 ms. */
    static String latency(Map<String, String> spec, KafkaProducer<byte[], byte[]> producer,
                          String topic, byte[][] values, byte[][] keys) {
        double rate = Double.parseDouble(spec.getOrDefault("rate", "20000"));
        int total = (int) timedRecords(spec);
        long[] sent = new long[total];
        long[] acked = new long[total];
        Outcomes outcomes = new Outcomes();
        Meter meter = new Meter();
        meter.start();
        long started = System.nanoTime();
        int next = 0;
        while (next < total) {
            double elapsed = (System.nanoTime() - started) / 1e9;
            int stop = (int) Math.min(total, Math.floor(elapsed * rate) + 1);
            for (int i = next; i < stop; i++) {
                final int index = i;
                sent[i] = System.nanoTime();
                producer.send(record(topic, values, keys, i), (metadata, exception) -> {
                    if (exception == null) {
                        acked[index] = System.nanoTime();
                        outcomes.acked.incrementAndGet();
                    } else {
                        outcomes.fail(exception);
                    }
                });
            }
            next = Math.max(next, stop);
            long delay = started + (long) (next / rate * 1e9) - System.nanoTime();
            if (next < total && delay > 0) {
                LockSupport.parkNanos(Math.max(delay, MIN_TICK_NANOS));
            }
        }
        meter.sentAt = System.nanoTime();
        producer.flush();
        meter.stop();
        double[] latencies = new double[total];
        int n = 0;
        for (int i = 0; i < total; i++) {
            if (acked[i] != 0) {
                latencies[n++] = (acked[i] - sent[i]) / 1e6;
            }
        }
        double[] sorted = Arrays.copyOf(latencies, n);
        Arrays.sort(sorted);
        StringBuilder latency = new StringBuilder();
        if (n > 0) {
            double sum = 0;
            for (double value : sorted) {
                sum += value;
            }
            latency.append("\"latency_ms\":{")
                    .append("\"p50\":").append(rank(sorted, 0.50))
                    .append(",\"p95\":").append(rank(sorted, 0.95))
                    .append(",\"p99\":").append(rank(sorted, 0.99))
                    .append(",\"p99_9\":").append(rank(sorted, 0.999))
                    .append(",\"max\":").append(sorted[n - 1])
                    .append(",\"mean\":").append(sum / n).append("}");
        } else {
            latency.append("\"latency_ms\":{}");
        }
        double sending = (meter.sentAt - meter.wallStart) / 1e9;
        double achieved = sending > 0 && total > 1 ? (total - 1) / sending : 0.0;
        latency.append(",\"rate\":").append(rate).append(",\"achieved_rate\":").append(achieved);
        return result(spec, meter, total, outcomes.acked.get(), outcomes.failed.get(),
                outcomes.samples,
                latency.toString());
    }

    /** Nearest rank, as bench/runners/_common.py's latency_summary. */
    static double rank(double[] sorted, double p) {
        int n = sorted.length;
        int index = (int) Math.min(n - 1, Math.max(0, Math.ceil(p * n) - 1));
        return sorted[index];
    }

    static String result(Map<String, String> spec, Meter meter, long sent, long acked,
                         long failed, List<String> samples, String latency) {
        long lost = Math.max(0, sent - acked - failed);
        double seconds = meter.seconds();
        int size = Integer.parseInt(spec.getOrDefault("size", "100"));
        List<String> errorSamples;
        synchronized (samples) {
            errorSamples = new ArrayList<>(samples.subList(0, Math.min(samples.size(),
                    MAX_ERROR_SAMPLES)));
        }
        if (lost > 0) {
            errorSamples.add(lost + " record(s) never acknowledged nor failed");
        }
        StringBuilder out = new StringBuilder("{");
        out.append(field("client", spec.get("client"))).append(',')
                .append(field("scenario", spec.get("scenario"))).append(',')
                .append(field("mode", spec.get("mode"))).append(',')
                .append("\"size\":").append(size).append(',')
                .append("\"keyed\":").append(Boolean.parseBoolean(spec.get("keyed"))).append(',')
                .append(field("acks", spec.get("acks"))).append(',')
                .append(field("compression", spec.get("compression"))).append(',')
                .append("\"records\":").append(sent).append(',')
                .append("\"acked\":").append(acked).append(',')
                .append("\"errors\":").append(failed + lost).append(',')
                .append("\"error_samples\":[");
        for (int i = 0; i < errorSamples.size(); i++) {
            out.append(i == 0 ? "" : ",").append(quote(errorSamples.get(i)));
        }
        out.append("],\"warmup\":").append(spec.getOrDefault("warmup", "1000"))
                .append(",\"seconds\":").append(seconds)
                .append(",\"msgs_per_s\":").append(seconds > 0 ? acked / seconds : 0.0)
                .append(",\"mb_per_s\":").append(seconds > 0 ? acked * (double) size / seconds / 1e6 : 0.0)
                .append(",\"cpu_s\":").append(meter.cpu())
                .append(",\"cpu_s_per_million\":").append(sent > 0 ? meter.cpu() / sent * 1e6 : 0.0)
                .append(",\"rss_before_bytes\":").append(meter.rssBefore)
                .append(",\"peak_rss_bytes\":").append(peakRssBytes())
                .append(",\"pid\":").append(ProcessHandle.current().pid())
                .append(',').append(field("library", "kafka-clients (Java)"))
                .append(',').append(field("library_version", clientVersion()))
                .append(',').append(field("java_version", System.getProperty("java.version")))
                .append(',').append(field("jvm", System.getProperty("java.vm.name")))
                .append(',').append(field("loop", "jvm"));
        if (latency != null) {
            out.append(',').append(latency);
        }
        return out.append('}').toString();
    }

    /** The payload pool the Python runners use (bench/runners/_common.py's RunData):
     * the wrapper writes it as an int32 count and an int32 size, then the values. */
    static byte[][] readPayloads(Path path) throws IOException {
        try (DataInputStream in = new DataInputStream(Files.newInputStream(path))) {
            int count = in.readInt();
            int size = in.readInt();
            byte[][] values = new byte[count][];
            for (int i = 0; i < count; i++) {
                values[i] = new byte[size];
                in.readFully(values[i]);
            }
            return values;
        } finally {
            Files.deleteIfExists(path);
        }
    }

    /** b"key-%08d" % i for i in range(KEY_COUNT), as the Python runners' keys. */
    static byte[][] makeKeys() {
        byte[][] keys = new byte[KEY_COUNT][];
        for (int i = 0; i < KEY_COUNT; i++) {
            keys[i] = String.format(Locale.ROOT, "key-%08d", i).getBytes(StandardCharsets.US_ASCII);
        }
        return keys;
    }

    /** The kafka-clients version, from the properties file its jar carries. */
    static String clientVersion() {
        Properties version = new Properties();
        try (var in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) {
                version.load(in);
            }
        } catch (IOException ignored) {
            // unknown
        }
        return version.getProperty("version", "unknown");
    }

    /** User plus system CPU of the whole JVM (every thread: the sender, GC, the JIT). */
    static long processCpuNanos() {
        java.lang.management.OperatingSystemMXBean bean =
                ManagementFactory.getOperatingSystemMXBean();
        if (bean instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) bean).getProcessCpuTime();
        }
        return -1;
    }

    /** Peak resident set size (Linux: VmHWM of /proc/self/status), 0 where unknown. */
    static long peakRssBytes() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    String[] parts = line.trim().split("\\s+");
                    return Long.parseLong(parts[1]) * 1024L;
                }
            }
        } catch (IOException | RuntimeException ignored) {
            // not Linux
        }
        return 0;
    }

    static String field(String name, String value) {
        return quote(name) + ":" + (value == null ? "null" : quote(value));
    }

    static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
