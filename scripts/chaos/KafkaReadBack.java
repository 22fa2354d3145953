// scripts/chaos.sh's downstream check: reads every record of a Kafka topic,
// from the beginning to the end offsets it sees when it starts, with the
// stock Java consumer (kafka-clients, on the broker's classpath) and prints
// each value on its own line. Run in Java's single-file source mode:
//
//   java -cp "$(cat ~/.cache/tidegate/broker.classpath)" KafkaReadBack.java BOOTSTRAP TOPIC
//
// Exits 1 if it could not reach the end offsets within 120 s.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class KafkaReadBack {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", "read_committed");
        p.put("max.poll.records", "5000");
        long deadline = System.currentTimeMillis() + 120_000;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo i : c.partitionsFor(args[1], Duration.ofSeconds(30))) {
                parts.add(new TopicPartition(i.topic(), i.partition()));
            }
            c.assign(parts);
            c.seekToBeginning(parts);
            Map<TopicPartition, Long> end = c.endOffsets(parts);
            StringBuilder out = new StringBuilder();
            while (true) {
                boolean all = true;
                for (TopicPartition tp : parts) {
                    if (c.position(tp) < end.get(tp)) {
                        all = false;
                    }
                }
                if (all) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    System.err.println("read back: end offsets " + end + " not reached in 120 s");
                    System.exit(1);
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    out.append(new String(r.value(), StandardCharsets.UTF_8).replace('\n', ' ')).append('\n');
                }
                System.out.print(out);
                out.setLength(0);
            }
            System.out.flush();
        }
    }
}
