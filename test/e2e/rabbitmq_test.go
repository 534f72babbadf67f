package e2e_test

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

const rabbitURL = "amqp://guest:guest@127.0.0.1:5672/"

// TestE2E_RabbitMQUnroutableIsRetriedThenDead: a publish no queue is bound
// to is an error (mandatory + publisher confirms), never a silent success:
// the dispatcher retries it and dead-letters it after max_attempts. Runs
// against the machine's real RabbitMQ.
func TestE2E_RabbitMQUnroutableIsRetriedThenDead(t *testing.T) {
	conn, err := amqp.Dial(rabbitURL)
	if err != nil {
		t.Skipf("RabbitMQ at %s unreachable: %v", rabbitURL, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	exchange := "ankusa-e2e-" + hex.EncodeToString(raw[:])
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })

	rc := newReceiver(t, status(200)) // unused: the source's only sink is RabbitMQ
	in := startInstance(t, rc, func(c *config.Config) {
		c.Retry.MaxAttempts = 3
		c.Dispatch.BreakerFailures = 100
		s := c.Sources[sourceID]
		s.Sinks = []config.SinkConfig{{ID: "mq", Type: "rabbitmq", RabbitMQ: &config.RabbitMQSink{
			URL: rabbitURL, Exchange: exchange, RoutingKey: "nobody-listens", TimeoutMs: 5_000,
		}}}
		c.Sources[sourceID] = s
	})
	id := in.post(`{"x":1}`, "application/json")
	testutil.Eventually(t, waitFor, "dead-lettered after 3 attempts", func() bool {
		v, ok := in.hook(id)
		return ok && len(v.Deliveries) == 1 && v.Deliveries[0].State == "dead"
	})
	v, _ := in.hook(id)
	d := v.Deliveries[0]
	if d.Attempts != 3 || !strings.Contains(d.LastError, "nobody-listens") {
		t.Fatalf("delivery = %+v; want dead after 3 attempts naming the routing key", d)
	}
	if dl := in.dlq(); dl.Total != 1 {
		t.Fatalf("dlq total = %d, want 1", dl.Total)
	}
}
