package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// envOverride maps one ANKUSA_* variable onto one key. Adding an override is
// one line in envOverrides.
type envOverride struct {
	env string
	key string // dotted key, used in error messages
	set func(c *Config, val string) error
}

// envOverrides is the single table of environment overrides. It is a
// function rather than a package variable so it cannot be mutated.
func envOverrides() []envOverride {
	return []envOverride{
		{"ANKUSA_DATA_DIR", "node.data_dir", setString(func(c *Config) *string { return &c.Node.DataDir })},
		{"ANKUSA_INSTANCE", "node.instance", setString(func(c *Config) *string { return &c.Node.Instance })},
		{"ANKUSA_HTTP_IP", "http.ip", setString(func(c *Config) *string { return &c.HTTP.IP })},
		{"ANKUSA_HTTP_PORT", "http.port", setInt(func(c *Config) *int { return &c.HTTP.Port })},
		{"ANKUSA_HTTP_ROUTING", "http.routing", setString(func(c *Config) *string { return &c.HTTP.Routing })},
		{"ANKUSA_ADMIN_IP", "admin.ip", setString(func(c *Config) *string { return &c.Admin.IP })},
		{"ANKUSA_ADMIN_PORT", "admin.port", setInt(func(c *Config) *int { return &c.Admin.Port })},
		{"ANKUSA_LOG_LEVEL", "log.level", setString(func(c *Config) *string { return &c.Log.Level })},
		{"ANKUSA_LOG_FORMAT", "log.format", setString(func(c *Config) *string { return &c.Log.Format })},
		{"ANKUSA_WAL_TYPE", "wal.type", setString(func(c *Config) *string { return &c.WAL.Type })},
		{"ANKUSA_INTAKE_TYPE", "intake.type", setString(func(c *Config) *string { return &c.Intake.Type })},
		{"ANKUSA_INTAKE_NODE_ID", "intake.node_id", setString(func(c *Config) *string { return &c.Intake.NodeID })},
		{"ANKUSA_BACKUP_ENABLED", "backup.enabled", setBool(func(c *Config) *bool { return &c.Backup.Enabled })},
	}
}

// envConfigPath names the config file (Load); it is not an override.
const envConfigPath = "ANKUSA_CONFIG"

// envTestPrefix names the test suite's own variables (ANKUSA_TEST_NATS_URL
// and the like): a developer's shell may hold them, and they are no
// override of anything.
const envTestPrefix = "ANKUSA_TEST_"

// unknownEnv returns one violation per ANKUSA_* name that is neither an
// override, ANKUSA_CONFIG, an ANKUSA_TEST_* variable, nor interpolated by
// the file (referenced).
// Names nil (no environment to list) finds none.
func unknownEnv(names []string, referenced map[string]bool) Errors {
	known := map[string]bool{envConfigPath: true}
	var list []string
	for _, o := range envOverrides() {
		known[o.env] = true
		list = append(list, o.env)
	}
	var errs Errors
	for _, n := range names {
		if strings.HasPrefix(n, "ANKUSA_") && !strings.HasPrefix(n, envTestPrefix) && !known[n] && !referenced[n] {
			errs = append(errs, &Error{Key: n, Rule: fmt.Sprintf(
				"is not an environment override this version knows (known: %s, and ANKUSA_CONFIG); unset it, or reference it in the file as ${%s}",
				strings.Join(list, ", "), n)})
		}
	}
	return errs
}

// applyEnv applies every set, non-empty override. An empty value is treated
// as unset, so `ANKUSA_LOG_LEVEL= ankusa` does not blank a key. It returns
// which env var set which key (for error messages) and the overrides whose
// value could not be parsed; those leave the key unchanged.
func applyEnv(c *Config, getenv func(string) (string, bool)) (map[string]string, Errors) {
	setBy := map[string]string{}
	var errs Errors
	for _, o := range envOverrides() {
		val, ok := getenv(o.env)
		if !ok || val == "" {
			continue
		}
		if err := o.set(c, val); err != nil {
			errs = append(errs, &Error{Key: o.key, Rule: fmt.Sprintf("%s=%q: %v", o.env, val, err)})
			continue
		}
		setBy[o.key] = o.env
	}
	return setBy, errs
}

func setString(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, val string) error {
		*field(c) = val
		return nil
	}
}

func setBool(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, val string) error {
		b, err := strconv.ParseBool(val)
		if err != nil {
			return errors.New("not a boolean")
		}
		*field(c) = b
		return nil
	}
}

func setInt(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, val string) error {
		n, err := strconv.Atoi(val)
		if err != nil {
			return errors.New("not an integer")
		}
		*field(c) = n
		return nil
	}
}
