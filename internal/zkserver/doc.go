// Package zkserver starts and controls real Apache ZooKeeper servers as
// child processes, for tests and for the `zketcd dev` command.
//
// A standalone server is started with [StartStandalone]; an ensemble of n
// quorum members with [StartEnsemble]. Every server runs in its own JVM, in
// its own process group, listening on 127.0.0.1 only, with its configuration
// (zoo.cfg), data and log file (zookeeper.log, see [Server.LogPath]) in a
// directory of its own. A [Server] can be stopped ([Server.Stop]), crashed
// ([Server.Kill]), frozen ([Server.Pause]/[Server.Resume]) and started again
// on the same directory and ports ([Server.Start]); data survives restarts.
//
// ZooKeeper itself is not bundled: by default the Debian/Ubuntu layout is
// used (the `zookeeper` package's /usr/share/java/zookeeper.jar plus
// slf4j-simple.jar, and `java` from $JAVA_HOME or $PATH). [Preflight] reports
// whether that is available; [Options.ClassPath], [Options.Java] and the
// ZKETCD_ZK_CLASSPATH environment variable override it.
//
// Free ports are chosen by a [PortAllocator]. The JVM binds its ports seconds
// after they were chosen, so all servers of one process share a process-wide
// allocator unless [Options.Ports] names another one; see [PortAllocator].
//
// The subpackage zkservertest wraps all this for tests: it starts servers
// under t.TempDir(), stops them in t.Cleanup and fails the test clearly when
// Java or the ZooKeeper jars are missing.
package zkserver
