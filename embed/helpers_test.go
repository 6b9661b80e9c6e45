package embed_test

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// startExpectingFailure starts an instance that should fail to open, and
// returns its error.
func startExpectingFailure(t *testing.T, zkAddr, root, auth string) (*embed.Zketcd, error) {
	t.Helper()
	lg := testutil.Logger(logrus.ErrorLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ids []string
	if auth != "" {
		ids = []string{auth}
	}
	z, err := embed.Start(ctx, embed.Config{
		Engine: engine.Config{
			Store: zkstore.Config{Servers: []string{zkAddr}, Root: root, Auth: ids},
			Name:  "intruder",
		},
		ClientAddrs: []string{"127.0.0.1:0"},
		Logger:      lg,
	})
	if err == nil {
		z.Close(time.Second)
	}
	return z, err
}
