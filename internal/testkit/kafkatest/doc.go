// Package kafkatest starts private Apache Kafka brokers for tests.
//
// # Brokers
//
// [Start] starts one combined broker and controller in KRaft mode in a
// temporary directory: free 127.0.0.1 ports for its client and controller
// listeners, a storage directory formatted with a fresh cluster ID, a small
// heap, automatic topic creation off and group rebalances without their
// initial delay. [StartCluster] starts n such nodes as one cluster (every
// node a voter of the controller quorum), so a test can kill a partition
// leader. A node is stopped in t.Cleanup; [Node.Kill] stops it as a crash
// does (SIGKILL) and [Node.Restart] starts it again with its data;
// [Node.Pause] freezes it (SIGSTOP) and [Node.Resume] lets it run again.
//
// The controller quorum's fetch and election timeouts are longer than
// Kafka's defaults, so that voters whose JVMs a loaded machine starves
// do not depose their leader again and again while the brokers, which
// listen only once a controller registered them, wait. Each node logs
// at INFO to server.log in its directory. A start is given up once no
// node answered nor wrote to its log for 90 s (or after 5 minutes in
// all), so that JVMs which a loaded machine starves are waited for; a
// start that fails logs the last lines of every node's log.
//
// # Requirements
//
// The broker's jars are fetched once from Maven Central by scripts/setup.sh
// (the version pinned in scripts/kafka/pom.xml) into
// ~/.m2/bus-kafka/<version>/libs, or the directory named by BUS_KAFKA_LIBS.
// Nothing is downloaded at test time: missing jars fail the test with a
// message naming scripts/setup.sh, rather than skipping it, so a CI machine
// without Kafka cannot pass silently. The broker runs on the java found in
// JAVA_HOME or on PATH (Java 17 or later).
package kafkatest
