package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transporttest"

	_ "github.com/babelqueue-go/babelqueue/transport/artemis"
)

var artemisBroker = broker{
	name: "Artemis", urlEnv: "BQ_ARTEMIS_URL", gate: "artemis", bind: artemisBinding,
	private:   privateArtemis,
	open:      openProxied,
	sharedCut: true,
}

func artemisBinding(t *testing.T, raw string) *faultsuite.Binding {
	u := parseURL(t, raw)
	manage := func(ctx context.Context, op string, params ...any) error { return artemisManage(ctx, u, op, params...) }
	return &faultsuite.Binding{
		Name: "Artemis",
		URL:  func(faultsuite.Role, string) string { return raw },
		BreakDLQ: func(ctx context.Context, _, dlq string) (func(context.Context) error, error) {
			// Every right of role amq on the dead-letter address but send.
			err := manage(ctx, "addSecuritySettings", dlq, "bqfaults-nobody", "amq", "amq", "amq", "amq", "amq", "amq", "amq", "amq", "amq")
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return manage(ctx, "removeSecuritySettings", dlq) }, nil
		},
		DLQMethod: "security settings on the dead-letter address that give role amq every right but send " +
			"(the management operation addSecuritySettings over AMQP): Artemis rejects every dead letter as " +
			"unauthorized; healed by removeSecuritySettings",
		// Held deliveries, pipelined settlements whose writes are not confirmed yet, and
		// the accepts Artemis does not confirm.
		Duplicates: heldWindow(pipelinedWindow, "the deliveries a consumer held (prefetch = concurrency) and its "+
			"pipelined settlements not confirmed yet (at most the pipeline depth, max(256, prefetch)): an accept, not confirmed by "+
			"Artemis, lost with the connection redelivers"),
		Settings: "deliveries not accepted when a connection dies come back at once; an accept is not confirmed by " +
			"Artemis (it refuses receiver settle mode second), so an accept lost with the connection redelivers",
	}
}

// artemisManage invokes a broker management operation over AMQP: a request to
// activemq.management with the operation's name and its parameters as a JSON array,
// answered on a temporary address.
func artemisManage(ctx context.Context, u *url.URL, op string, params ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pass, _ := u.User.Password()
	conn, err := amqp.Dial(ctx, "amqp://"+u.Host, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(u.User.Username(), pass)})
	if err != nil {
		return err
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	recv, err := sess.NewReceiver(ctx, "", &amqp.ReceiverOptions{DynamicAddress: true})
	if err != nil {
		return fmt.Errorf("management reply address: %w", err)
	}
	snd, err := sess.NewSender(ctx, "activemq.management", nil)
	if err != nil {
		return err
	}
	body, err := json.Marshal(params)
	if err != nil {
		return err
	}
	reply := recv.Address()
	msg := &amqp.Message{
		Value:                 string(body),
		Properties:            &amqp.MessageProperties{ReplyTo: &reply},
		ApplicationProperties: map[string]any{"_AMQ_ResourceName": "broker", "_AMQ_OperationName": op},
	}
	if err := snd.Send(ctx, msg, nil); err != nil {
		return fmt.Errorf("management %s: %w", op, err)
	}
	resp, err := recv.Receive(ctx, nil)
	if err != nil {
		return fmt.Errorf("management %s: no answer: %w", op, err)
	}
	_ = recv.AcceptMessage(ctx, resp)
	if ok, _ := resp.ApplicationProperties["_AMQ_OperationSucceeded"].(bool); !ok {
		return fmt.Errorf("management %s failed: %v", op, resp.Value)
	}
	return nil
}

// privateArtemis creates an Artemis instance from the distribution scripts/brokers.sh
// caches, as scripts/brokers/artemis.sh creates the shared one (journal on, persistence
// on) but on free ports; the restart is SIGTERM (a clean stop) and a start on the same
// journal.
func privateArtemis(t *testing.T) *faultsuite.Binding {
	transporttest.BrokerURL(t, "BQ_ARTEMIS_URL", "artemis")
	const hint = "; run `scripts/brokers.sh up artemis` (it installs java and caches the Artemis distribution)"
	javaHome := os.Getenv("BQ_ARTEMIS_JAVA_HOME")
	if javaHome == "" {
		javaHome = os.Getenv("JAVA_HOME")
	}
	if javaHome == "" && os.Getenv("BQ_JAVA") != "" {
		javaHome = filepath.Dir(filepath.Dir(os.Getenv("BQ_JAVA")))
	}
	if javaHome == "" {
		if _, err := exec.LookPath("java"); err != nil {
			brokerproc.Require(t, "no java on PATH and neither JAVA_HOME nor BQ_JAVA set%s", hint)
		}
	}
	version := os.Getenv("BQ_ARTEMIS_VERSION")
	if version == "" {
		version = "2.40.0"
	}
	bin := filepath.Join(cacheDir(), "apache-artemis-"+version, "bin", "artemis")
	if _, err := os.Stat(bin); err != nil {
		brokerproc.Require(t, "no cached Artemis distribution (%s)%s", bin, hint)
	}
	inst := filepath.Join(privateDir(t, "artemis"), "instance")
	env := os.Environ()
	if javaHome != "" {
		env = append(env, "JAVA_HOME="+javaHome)
	}
	core := brokerproc.FreePort(t)
	amqpPort := brokerproc.FreePort(t, core)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	create := exec.CommandContext(ctx, bin, "create", inst, "--silent", "--force",
		"--user", "artemis", "--password", "artemis", "--role", "amq", "--allow-anonymous",
		"--host", "127.0.0.1", "--name", "bqfaults", "--default-port", strconv.Itoa(core),
		"--no-web", "--no-hornetq-acceptor", "--no-mqtt-acceptor", "--no-stomp-acceptor",
		"--nio", "--no-autotune", "--no-fsync", "--java-memory", "256M")
	create.Env = env
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("artemis create: %v\n%s", err, out)
	}
	edit := func(file string, change func(string) (string, error)) {
		t.Helper()
		p := filepath.Join(inst, "etc", file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := change(string(b))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("broker.xml", func(s string) (string, error) {
		if !strings.Contains(s, "tcp://127.0.0.1:5672?") {
			return "", errors.New("the AMQP acceptor is not where scripts/brokers/artemis.sh expects it")
		}
		s = strings.Replace(s, "tcp://127.0.0.1:5672?", "tcp://127.0.0.1:"+strconv.Itoa(amqpPort)+"?", 1)
		s = strings.Replace(s, `<address-setting match="#">`, `<address-setting match="#">
            <default-address-routing-type>ANYCAST</default-address-routing-type>
            <default-queue-routing-type>ANYCAST</default-queue-routing-type>`, 1)
		for _, m := range regexp.MustCompile(`tcp://[0-9.]+:([0-9]+)`).FindAllStringSubmatch(s, -1) {
			if m[1] != strconv.Itoa(core) && m[1] != strconv.Itoa(amqpPort) {
				return "", fmt.Errorf("an acceptor or connector still listens on %s", m[0])
			}
		}
		return s, nil
	})
	edit("artemis.profile", func(s string) (string, error) {
		s = regexp.MustCompile(`-Xms[0-9]+[MmGg]`).ReplaceAllString(s, "-Xms64M")
		return strings.Replace(s, "-XX:+UseG1GC", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1", 1), nil
	})
	raw := fmt.Sprintf("artemis://artemis:artemis@127.0.0.1:%d", amqpPort)
	p := brokerproc.New(t, brokerproc.Config{
		Name: "private Artemis",
		Command: func() *exec.Cmd {
			cmd := exec.Command(filepath.Join(inst, "bin", "artemis"), "run")
			cmd.Dir, cmd.Env = inst, env
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			return cmd
		},
		Log: filepath.Join(inst, "node.log"),
		Ready: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			conn, err := amqp.Dial(ctx, fmt.Sprintf("amqp://127.0.0.1:%d", amqpPort), &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("artemis", "artemis")})
			if err == nil {
				_ = conn.Close()
			}
			return err
		},
		Poll:     200 * time.Millisecond,
		Awaiting: "take a connection",
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	b := artemisBinding(t, raw)
	b.Stop = func() error { p.Stop(); return nil }
	b.Start = p.Start
	b.RestartMethod = "SIGTERM of a private Artemis instance (a clean stop; journal on), started again on its journal"
	return b
}
