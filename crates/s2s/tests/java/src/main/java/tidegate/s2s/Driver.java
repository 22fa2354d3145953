package tidegate.s2s;

import java.io.ByteArrayOutputStream;
import java.io.FileInputStream;
import java.io.InputStream;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

import org.apache.nifi.remote.Transaction;
import org.apache.nifi.remote.TransactionCompletion;
import org.apache.nifi.remote.TransferDirection;
import org.apache.nifi.remote.client.SiteToSiteClient;
import org.apache.nifi.remote.protocol.DataPacket;
import org.apache.nifi.remote.protocol.SiteToSiteTransportProtocol;

/**
 * Drives the stock nifi-site-to-site-client against Tidegate for the s2s
 * crate's interop tests and benchmark. Prints one JSON object per line.
 *
 * Modes: send, receive, cancel, bench. Options: --url, --transport RAW|HTTP,
 * --port NAME, --sizes a,b,c, --tx N, --compress, --tls KEYSTORE.p12
 * TRUSTSTORE.p12 PASSWORD, --expect N, --timeout-ms N, --clients N,
 * --packets N, --interval-ms N.
 */
public final class Driver {
    private final Map<String, String> opts = new HashMap<>();
    private final List<String> flags = new ArrayList<>();

    private Driver(String[] args) {
        for (int i = 1; i < args.length; i++) {
            String a = args[i];
            if (a.equals("--compress")) {
                flags.add(a);
            } else if (a.equals("--tls")) {
                opts.put("keystore", args[++i]);
                opts.put("truststore", args[++i]);
                opts.put("password", args[++i]);
            } else {
                opts.put(a.substring(2), args[++i]);
            }
        }
    }

    private String opt(String k, String d) {
        return opts.getOrDefault(k, d);
    }

    private int num(String k, int d) {
        return Integer.parseInt(opt(k, String.valueOf(d)));
    }

    static String esc(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String sha256(byte[] data) throws Exception {
        byte[] d = MessageDigest.getInstance("SHA-256").digest(data);
        StringBuilder b = new StringBuilder();
        for (byte x : d) {
            b.append(String.format("%02x", x));
        }
        return b.toString();
    }

    /** Deterministic content: byte j of FlowFile i is (i * 31 + j) % 251. */
    static byte[] content(int i, int size) {
        byte[] c = new byte[size];
        for (int j = 0; j < size; j++) {
            c[j] = (byte) ((i * 31 + j) % 251);
        }
        return c;
    }

    private SSLContext ssl() throws Exception {
        if (!opts.containsKey("keystore")) {
            return null;
        }
        char[] pw = opts.get("password").toCharArray();
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (InputStream in = new FileInputStream(opts.get("keystore"))) {
            ks.load(in, pw);
        }
        KeyStore ts = KeyStore.getInstance("PKCS12");
        try (InputStream in = new FileInputStream(opts.get("truststore"))) {
            ts.load(in, pw);
        }
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, pw);
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ts);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(kmf.getKeyManagers(), tmf.getTrustManagers(), null);
        return ctx;
    }

    private SiteToSiteClient client(String portName) throws Exception {
        SiteToSiteClient.Builder b = new SiteToSiteClient.Builder()
                .url(opt("url", "http://127.0.0.1:8080/nifi"))
                .transportProtocol(SiteToSiteTransportProtocol.valueOf(opt("transport", "RAW")))
                .useCompression(flags.contains("--compress"))
                .timeout(num("timeout-ms", 30000), TimeUnit.MILLISECONDS)
                .idleExpiration(70, TimeUnit.SECONDS)
                .requestBatchCount(num("batch", 100));
        if (opts.containsKey("port-id")) {
            b = b.portIdentifier(opts.get("port-id"));
        } else {
            b = b.portName(portName);
        }
        SSLContext ctx = ssl();
        if (ctx != null) {
            b = b.sslContext(ctx);
        }
        return b.build();
    }

    private void send() throws Exception {
        String[] sizes = opt("sizes", "0,1,1048576").split(",");
        int txs = num("tx", 1);
        try (SiteToSiteClient c = client(opt("port", "input"))) {
            int i = 0;
            for (int t = 0; t < txs; t++) {
                Transaction tx = c.createTransaction(TransferDirection.SEND);
                if (tx == null) {
                    emit("{\"event\":\"error\",\"message\":\"createTransaction returned null\"}");
                    return;
                }
                for (String s : sizes) {
                    Map<String, String> attrs = new HashMap<>();
                    attrs.put("i", String.valueOf(i));
                    attrs.put("tx", String.valueOf(t));
                    attrs.put("unicode", "h\u00e9llo \u2603 \ud83d\ude00");
                    tx.send(content(i, Integer.parseInt(s.trim())), attrs);
                    i++;
                }
                tx.confirm();
                TransactionCompletion done = tx.complete();
                emit("{\"event\":\"complete\",\"tx\":" + t + ",\"flowFiles\":" + done.getDataPacketsTransferred()
                        + ",\"backoff\":" + done.isBackoff() + "}");
            }
        }
    }

    private void cancel() throws Exception {
        try (SiteToSiteClient c = client(opt("port", "input"))) {
            Transaction tx = c.createTransaction(TransferDirection.SEND);
            tx.send(content(0, 10), new HashMap<>());
            tx.cancel("test cancel");
            emit("{\"event\":\"cancelled\"}");
            // The connection stays usable: a following transaction commits.
            Transaction tx2 = c.createTransaction(TransferDirection.SEND);
            Map<String, String> attrs = new HashMap<>();
            attrs.put("after", "cancel");
            tx2.send(content(1, 3), attrs);
            tx2.confirm();
            tx2.complete();
            emit("{\"event\":\"complete\",\"tx\":1,\"flowFiles\":1}");
        }
    }

    private void receive() throws Exception {
        int expect = num("expect", 1);
        long deadline = System.currentTimeMillis() + num("wait-ms", 30000);
        int got = 0;
        try (SiteToSiteClient c = client(opt("port", "output"))) {
            while (got < expect && System.currentTimeMillis() < deadline) {
                Transaction tx = c.createTransaction(TransferDirection.RECEIVE);
                if (tx == null) {
                    Thread.sleep(100);
                    continue;
                }
                int n = 0;
                DataPacket p;
                while ((p = tx.receive()) != null) {
                    ByteArrayOutputStream bos = new ByteArrayOutputStream();
                    p.getData().transferTo(bos);
                    byte[] data = bos.toByteArray();
                    StringBuilder a = new StringBuilder("{");
                    boolean first = true;
                    for (Map.Entry<String, String> e : p.getAttributes().entrySet()) {
                        if (!first) {
                            a.append(',');
                        }
                        first = false;
                        a.append(esc(e.getKey())).append(':').append(esc(e.getValue()));
                    }
                    a.append('}');
                    emit("{\"event\":\"flowfile\",\"size\":" + data.length + ",\"sha256\":" + esc(sha256(data))
                            + ",\"attributes\":" + a + "}");
                    n++;
                }
                tx.confirm();
                tx.complete();
                got += n;
                emit("{\"event\":\"complete\",\"flowFiles\":" + n + "}");
            }
        }
        emit("{\"event\":\"done\",\"received\":" + got + "}");
    }

    /** The seed's load test: one thread and one client per simulated client. */
    private void bench() throws Exception {
        int clients = num("clients", 10);
        int txs = num("tx", 10);
        int packets = num("packets", 5);
        int interval = num("interval-ms", 1000);
        AtomicLong ok = new AtomicLong(), fail = new AtomicLong();
        AtomicLong create = new AtomicLong(), send = new AtomicLong(), confirm = new AtomicLong(), complete = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        for (int id = 0; id < clients; id++) {
            final int cid = id;
            Thread th = new Thread(() -> {
                try (SiteToSiteClient c = client(opt("port", "input"))) {
                    for (int t = 0; t < txs; t++) {
                        try {
                            long t0 = System.nanoTime();
                            Transaction tx = c.createTransaction(TransferDirection.SEND);
                            if (tx == null) {
                                fail.incrementAndGet();
                                continue;
                            }
                            long t1 = System.nanoTime();
                            for (int p = 0; p < packets; p++) {
                                tx.send((cid + "," + t + "," + p + "\n").getBytes(), new HashMap<>());
                            }
                            long t2 = System.nanoTime();
                            tx.confirm();
                            long t3 = System.nanoTime();
                            tx.complete();
                            long t4 = System.nanoTime();
                            ok.incrementAndGet();
                            create.addAndGet(t1 - t0);
                            send.addAndGet(t2 - t1);
                            confirm.addAndGet(t3 - t2);
                            complete.addAndGet(t4 - t3);
                        } catch (Exception e) {
                            fail.incrementAndGet();
                        }
                        Thread.sleep(interval);
                    }
                } catch (Exception e) {
                    fail.incrementAndGet();
                }
            });
            threads.add(th);
            th.start();
            Thread.sleep(10);
        }
        for (Thread th : threads) {
            th.join();
        }
        long n = ok.get();
        String avg = n == 0 ? "-1,-1,-1,-1" : String.format("%.2f,%.2f,%.2f,%.2f", create.get() / 1e6 / n, send.get() / 1e6 / n,
                confirm.get() / 1e6 / n, complete.get() / 1e6 / n);
        String[] a = avg.split(",");
        emit(String.format("{\"event\":\"summary\",\"numOfClient\":%d,\"numOfTx\":%d,\"numOfPacketsPerTx\":%d,"
                + "\"txIntervalMillis\":%d,\"totalSuccessfulTx\":%d,\"totalFailureTx\":%d,\"avgCreateTxMillis\":%s,"
                + "\"avgSendMillis\":%s,\"avgConfirmMillis\":%s,\"avgCompleteMillis\":%s}",
                clients, txs, packets, interval, n, fail.get(), a[0], a[1], a[2], a[3]));
    }

    public static void main(String[] args) throws Exception {
        Driver d = new Driver(args);
        try {
            switch (args[0]) {
                case "send": d.send(); break;
                case "cancel": d.cancel(); break;
                case "receive": d.receive(); break;
                case "bench": d.bench(); break;
                default: throw new IllegalArgumentException("unknown mode " + args[0]);
            }
        } catch (Exception e) {
            emit("{\"event\":\"error\",\"class\":" + esc(e.getClass().getName()) + ",\"message\":" + esc(String.valueOf(e.getMessage())) + "}");
            System.exit(2);
        }
        System.exit(0);
    }
}
