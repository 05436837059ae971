package fieldcrypt_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/schema/fieldcrypt"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// Fields a schema marks x-gdpr-sensitive are encrypted on publish and decrypted before
// the handler; schema checks run on the cleartext on both sides.
func Example() {
	ctx := context.Background()
	reg, err := schema.LoadRegistry("../testdata/registry")
	if err != nil {
		panic(err)
	}
	// In production the secret comes from a secret store, e.g. with KeyFromBase64.
	keys, err := fieldcrypt.NewAESGCM(fieldcrypt.Key{ID: "2025-07", Secret: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		panic(err)
	}
	fields, err := fieldcrypt.New(reg, keys)
	if err != nil {
		panic(err)
	}

	broker := memory.New()
	app, err := babelqueue.New(broker, babelqueue.WithQueue("identity"),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	defer app.Close(ctx)
	app.UsePublish(schema.PublishCheck(reg), fields.Protect)
	app.Use(fields.Unprotect, schema.Middleware(reg))

	type user struct {
		UserID int    `json:"user_id"`
		Email  string `json:"email"`
	}
	runCtx, stop := context.WithCancel(ctx)
	babelqueue.Handle(app, "urn:babel:users:registered", func(_ context.Context, u user, _ *babelqueue.Message) error {
		fmt.Println("the handler sees:", u.Email)
		stop()
		return nil
	})
	if _, err := app.Publish(ctx, "urn:babel:users:registered", user{UserID: 7781, Email: "ayse@example.com"}); err != nil {
		panic(err)
	}
	body := broker.Messages("identity")[0].Body
	fmt.Println("in clear on the broker:", bytes.Contains(body, []byte("ayse@")))
	_ = app.Run(runCtx)
	// Output:
	// in clear on the broker: false
	// the handler sees: ayse@example.com
}

// Rotation: consumers hold the new key and the old one; KeyID finds values still
// sealed with the old key.
func ExampleAESGCM_KeyID() {
	ctx := context.Background()
	old := fieldcrypt.Key{ID: "2025-01", Secret: bytes.Repeat([]byte{1}, 32)}
	cur := fieldcrypt.Key{ID: "2025-07", Secret: bytes.Repeat([]byte{2}, 32)}
	before, _ := fieldcrypt.NewAESGCM(old)
	sealed, _ := before.Encrypt(ctx, []byte(`"ayse@example.com"`))

	after, err := fieldcrypt.NewAESGCM(cur, old) // encrypts with cur, opens both
	if err != nil {
		panic(err)
	}
	id, _ := after.KeyID(sealed)
	plain, _ := after.Decrypt(ctx, sealed)
	fmt.Println(id, string(plain))
	// Output: 2025-01 "ayse@example.com"
}
