package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
)

// guardOff are the values of checkpoint_guard_dir that turn the guard off.
var guardOff = []string{"off", "none"}

// checkpointGuardDir resolves checkpoint_guard_dir (Config.CheckpointGuardDir,
// --checkpoint-guard-dir) to the directory given to
// ledger.WithCheckpointGuardDir, "" for none: "off" or "none" turn it off;
// "" is the default, $XDG_STATE_HOME/auditd/guard (an absolute
// XDG_STATE_HOME), or else ~/.local/state/auditd/guard; anything else is
// taken as given.
func checkpointGuardDir(v string) (string, error) {
	for _, off := range guardOff {
		if strings.EqualFold(v, off) {
			return "", nil
		}
	}
	if v != "" {
		return v, nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "auditd", "guard"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		// No $HOME (a system service without User=): the account's home.
		if u, uerr := user.Current(); uerr == nil && u.HomeDir != "" {
			home, err = u.HomeDir, nil
		}
	}
	if err != nil || home == "" {
		return "", errors.New("checkpoint_guard_dir: no default: neither XDG_STATE_HOME nor HOME is set, and the account has no home directory; " +
			"set checkpoint_guard_dir (--checkpoint-guard-dir) to a directory outside the data dir, or to off")
	}
	return filepath.Join(home, ".local", "state", "auditd", "guard"), nil
}

// checkpointGuard resolves the configuration's guard dir for serve and
// says where it is; a guard inside the data dir, which a restore of the
// data dir rolls back with it, is warned about.
func (c *Config) checkpointGuard(logger *slog.Logger) (string, error) {
	dir, err := checkpointGuardDir(c.CheckpointGuardDir)
	if err != nil || dir == "" {
		if err == nil {
			logger.Warn("checkpoint guard off: a data directory restored from an older copy is caught only by witnesses and peers", "checkpoint_guard_dir", c.CheckpointGuardDir)
		}
		return "", err
	}
	if within(dir, c.DataDir) {
		logger.Warn("the checkpoint guard dir is inside the data dir: restoring the data dir rolls the guard back with it", "checkpoint_guard_dir", dir, "data_dir", c.DataDir)
	}
	return dir, nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// guardFlagUsage is the help of --checkpoint-guard-dir.
var guardFlagUsage = fmt.Sprintf("directory of a second copy of each log's latest checkpoint, by signing key, outside the data dir "+
	"(default $XDG_STATE_HOME/auditd/guard or ~/.local/state/auditd/guard; %s: none)", strings.Join(guardOff, " or "))
