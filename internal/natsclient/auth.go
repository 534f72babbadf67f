package natsclient

import (
	"errors"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Auth is the configured credentials: at most one method, User/Password,
// Token, CredsFile or NKeyFile (a seed file).
type Auth struct {
	User, Password, Token, CredsFile, NKeyFile string
}

// AuthOptions turns the configured credentials into client options; at
// most one method may be set.
func AuthOptions(a Auth) ([]nats.Option, error) {
	var opts []nats.Option
	var methods []string
	if a.User != "" || a.Password != "" {
		if a.User == "" {
			return nil, errors.New("password set without user")
		}
		opts = append(opts, nats.UserInfo(a.User, a.Password))
		methods = append(methods, "user/password")
	}
	if a.Token != "" {
		opts = append(opts, nats.Token(a.Token))
		methods = append(methods, "token")
	}
	if a.CredsFile != "" {
		// The client reads the file at every (re)connect, so a rotated file
		// is picked up; an unreadable one is refused here, at boot.
		if _, err := os.ReadFile(a.CredsFile); err != nil {
			return nil, errors.New("creds_file: " + err.Error())
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
		methods = append(methods, "creds_file")
	}
	if a.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(a.NKeyFile)
		if err != nil {
			return nil, errors.New("nkey_file: " + err.Error())
		}
		opts = append(opts, o)
		methods = append(methods, "nkey_file")
	}
	if len(methods) > 1 {
		return nil, errors.New("set at most one of user/password, token, creds_file, nkey_file; got " + strings.Join(methods, ", "))
	}
	return opts, nil
}
