// The Site-to-Site producer of scripts/chaos.sh: the stock
// nifi-site-to-site-client 1.28.1 (RAW transport) sending transactions of
// numbered FlowFiles to input port "input". Run in Java's single-file
// source mode with crates/s2s/tests/java/v1/target/lib/* on the classpath:
//
//   java -cp "crates/s2s/tests/java/v1/target/lib/*" S2sChaos.java \
//        URLS FIRST PER_TX TX_PER_SEC STOP_FILE
//
// URLS: comma-separated node URLs (http://host:port/nifi); the client is
// built on URLS[FIRST] and moves on to the next after a failure, printing
// "AT <index>" each time it builds one. FlowFile
// i has content "s2s-<i>" and attribute chaos.id = i. A transaction the
// server answered TRANSACTION_FINISHED (complete() returned) prints
//   ACK <epoch ms> <first id> <last id>
// and one that failed anywhere prints ERR and is sent again, same ids, on a
// new client (at-least-once). Emits until STOP_FILE exists, then prints
// DONE <next id>.
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.nifi.remote.Transaction;
import org.apache.nifi.remote.TransferDirection;
import org.apache.nifi.remote.client.SiteToSiteClient;
import org.apache.nifi.remote.protocol.SiteToSiteTransportProtocol;

public final class S2sChaos {
    static SiteToSiteClient client(String url) {
        return new SiteToSiteClient.Builder()
                .url(url)
                .transportProtocol(SiteToSiteTransportProtocol.RAW)
                .portName("input")
                .timeout(3, TimeUnit.SECONDS)
                .idleExpiration(30, TimeUnit.SECONDS)
                .build();
    }

    public static void main(String[] args) throws Exception {
        String[] urls = args[0].split(",");
        int which = Integer.parseInt(args[1]);
        int perTx = Integer.parseInt(args[2]);
        long txPerSec = Long.parseLong(args[3]);
        java.io.File stop = new java.io.File(args[4]);
        System.out.println("AT " + which);
        SiteToSiteClient c = client(urls[which]);
        long next = 0;
        long start = System.nanoTime();
        long t = 0;
        while (!stop.exists()) {
            long due = start + t * 1_000_000_000L / txPerSec;
            long wait = due - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
            }
            try {
                Transaction tx = c.createTransaction(TransferDirection.SEND);
                if (tx == null) {
                    throw new IllegalStateException("no peer accepts a transaction");
                }
                for (long i = next; i < next + perTx; i++) {
                    Map<String, String> attrs = new HashMap<>();
                    attrs.put("chaos.id", String.valueOf(i));
                    tx.send(("s2s-" + i).getBytes(StandardCharsets.UTF_8), attrs);
                }
                tx.confirm();
                tx.complete();
                System.out.println("ACK " + System.currentTimeMillis() + " " + next + " " + (next + perTx - 1));
                System.out.flush();
                next += perTx;
                t++;
            } catch (Exception e) {
                System.out.println("ERR " + System.currentTimeMillis() + " " + e.getClass().getSimpleName()
                        + ": " + String.valueOf(e.getMessage()).replace('\n', ' '));
                System.out.flush();
                try {
                    c.close();
                } catch (Exception ignored) {
                    // the old client is gone either way
                }
                Thread.sleep(200);
                which = (which + 1) % urls.length;
                System.out.println("AT " + which);
                c = client(urls[which]);
                // Keep the schedule from bursting after an outage.
                start = System.nanoTime();
                t = 0;
            }
        }
        c.close();
        System.out.println("DONE " + next);
        System.exit(0);
    }
}
