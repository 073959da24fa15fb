// Kafka's own Java client as a reference for the tests: what partition the Java producer
// picks for a key, and what the Java consumer reads from a topic.
//
// A single source file, run with the kafka-clients jar of the broker's version on the
// class path (tests/support/java_client.py compiles it once and caches the classes):
//
//   java -cp "<kafka libs>/*:<classes>" KafkaReference partition <bootstrap> <topic>
//       Reads keys from stdin, one per line in hex (an empty line is the empty key),
//       produces each with KafkaProducer (default partitioner, acks=all) and prints the
//       partition its RecordMetadata names, one per line, in the same order.
//
//   java ... KafkaReference consume <bootstrap> <topic> <expected> [isolation] [timeout-s]
//       Reads every partition of the topic from the beginning with KafkaConsumer
//       (assign(), check.crcs=true, isolation "read_uncommitted" by default) until it has
//       read <expected> records and reached the end offsets, or the timeout (30 s) runs
//       out. Prints one JSON object per record (see recordJson).
//
// stdout carries the results only: everything else (the client's logging included) goes
// to stderr. The exit code is 0 on success, 2 on a usage error, 1 on any other failure.

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaReference {
    private static final HexFormat HEX = HexFormat.of();

    public static void main(String[] args) throws Exception {
        // Results go to the real stdout; System.out becomes stderr before any logger is
        // made, so whatever the client logs (log4j's default console is System.out) cannot
        // mix with them. Warnings and errors only.
        PrintStream results = new PrintStream(
                new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        if (System.getProperty("org.apache.logging.log4j.level") == null) {
            System.setProperty("org.apache.logging.log4j.level", "WARN");
        }

        if (args.length >= 3 && args[0].equals("partition")) {
            partition(args[1], args[2], results);
        } else if (args.length >= 4 && args.length <= 6 && args[0].equals("consume")) {
            String isolation = args.length >= 5 ? args[4] : "read_uncommitted";
            double timeout = args.length >= 6 ? Double.parseDouble(args[5]) : 30.0;
            consume(args[1], args[2], Integer.parseInt(args[3]), isolation, timeout, results);
        } else {
            System.err.println("usage: KafkaReference partition <bootstrap> <topic> < keys.hex");
            System.err.println("       KafkaReference consume <bootstrap> <topic> <expected>"
                    + " [read_uncommitted|read_committed] [timeout-seconds]");
            System.exit(2);
        }
        results.flush();
        if (results.checkError()) {
            System.exit(1);
        }
    }

    /** Produce each key read from stdin; print the partition the producer chose for it. */
    private static void partition(String bootstrap, String topic, PrintStream results)
            throws Exception {
        List<byte[]> keys = new ArrayList<>();
        try (BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.US_ASCII))) {
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                keys.add(HEX.parseHex(line.strip()));
            }
        }
        Properties config = new Properties();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ProducerConfig.ACKS_CONFIG, "all");
        config.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        // No partitioner.class: the builtin one, murmur2 of the serialized key.
        List<Future<RecordMetadata>> sent = new ArrayList<>(keys.size());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
            for (byte[] key : keys) {
                sent.add(producer.send(new ProducerRecord<>(topic, key, key)));
            }
            producer.flush();
            for (Future<RecordMetadata> future : sent) {
                results.println(future.get().partition());
            }
        }
    }

    /** Read the whole topic from the beginning; print each record as a JSON line. */
    private static void consume(String bootstrap, String topic, int expected, String isolation,
            double timeoutSeconds, PrintStream results) {
        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        config.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");  // no group: assign()
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        config.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        long deadline = System.nanoTime() + (long) (timeoutSeconds * 1e9);
        int count = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(10))) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            if (partitions.isEmpty()) {
                throw new IllegalStateException("no partitions found for topic " + topic);
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            // Once the expected count is in, read on to the end offsets as they are then
            // (the last stable offsets with read_committed), so that records beyond the
            // expected ones are printed too and the caller sees them.
            Map<TopicPartition, Long> ends = null;
            while (System.nanoTime() < deadline) {
                if (count >= expected) {
                    if (ends == null) {
                        ends = consumer.endOffsets(partitions, Duration.ofSeconds(10));
                    }
                    if (reached(consumer, ends)) {
                        break;
                    }
                }
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(100))) {
                    results.println(recordJson(record));
                    count++;
                }
            }
        }
        if (count < expected) {
            System.err.printf("read %d of %d records before the timeout%n", count, expected);
        }
    }

    private static boolean reached(KafkaConsumer<?, ?> consumer, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> end : ends.entrySet()) {
            if (consumer.position(end.getKey()) < end.getValue()) {
                return false;
            }
        }
        return true;
    }

    /**
     * {"topic": ..., "partition": 0, "offset": 0, "timestamp": ms, "timestampType":
     * "CreateTime", "key": hex|null, "value": hex|null, "headers": [[key-hex, hex|null]...]}.
     * Bytes are hex, header keys too (their UTF-8 bytes), so nothing needs escaping but the
     * topic, whose legal characters ([a-zA-Z0-9._-]) need none.
     */
    private static String recordJson(ConsumerRecord<byte[], byte[]> record) {
        StringBuilder json = new StringBuilder(256);
        json.append("{\"topic\":\"").append(record.topic()).append('"')
                .append(",\"partition\":").append(record.partition())
                .append(",\"offset\":").append(record.offset())
                .append(",\"timestamp\":").append(record.timestamp())
                .append(",\"timestampType\":\"").append(record.timestampType().name).append('"')
                .append(",\"key\":").append(hexOrNull(record.key()))
                .append(",\"value\":").append(hexOrNull(record.value()))
                .append(",\"headers\":[");
        String separator = "";
        for (Header header : record.headers()) {
            json.append(separator).append("[\"")
                    .append(HEX.formatHex(header.key().getBytes(StandardCharsets.UTF_8)))
                    .append("\",").append(hexOrNull(header.value())).append(']');
            separator = ",";
        }
        return json.append("]}").toString();
    }

    private static String hexOrNull(byte[] bytes) {
        return bytes == null ? "null" : '"' + HEX.formatHex(bytes) + '"';
    }
}
