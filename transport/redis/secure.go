package redis

import (
	"strings"

	"github.com/babelqueue-go/babelqueue/transport"
)

// authCause marks Redis's refusals of the connection's credentials or ACL permissions
// (WRONGPASS, NOAUTH, NOPERM) so the open error matches [transport.ErrAuth].
func authCause(err error) error {
	msg := err.Error()
	for _, code := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(msg, code) {
			return transport.AuthFailure(err)
		}
	}
	return err
}
