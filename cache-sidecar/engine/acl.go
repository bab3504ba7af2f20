package engine

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// RedisLinkUser is the redis user the proxy's links to a redis engine log in as. It may run
// only the commands the proxy forwards for tenants, and redis checks that for the commands a
// script runs too, so a tenant's script cannot reach MIGRATE, FLUSHALL, SELECT, CONFIG...
// inside its engine. The default user, which only the sidecar's own connections use (the
// socket is the sidecar's alone), keeps every command for the manager.
const RedisLinkUser = "cacheqos-link"

// RedisACLFile is the ACL file WriteRedisACL writes in an engine's directory.
const RedisACLFile = "users.acl"

const (
	linkPasswordFile  = "link-password"
	linkPasswordBytes = 32
)

// redisLinkCommands are the commands RedisLinkUser may run: every command the proxy forwards
// (routed, split or sent to any or all engines; a container's forwarded subcommands only) and
// those its links send themselves (HELLO, and MULTI/EXEC/DISCARD around a transaction), but
// INFO: the proxy filters its reply for the tenant and sends it as the engine's default user,
// so that a script's redis.call('INFO') gets NOPERM instead of the engine's unfiltered INFO.
func redisLinkCommands() []string {
	cmds := []string{"hello", "multi", "exec", "discard"}
	forwarded := func(s *resp.CommandSpec) bool {
		return s.Handling != protocol.HandleRefuse && s.Handling != protocol.HandleProxy && s.Name != "info"
	}
	for _, s := range resp.Commands() {
		switch {
		case !forwarded(s):
		case s.Subcommands == nil:
			cmds = append(cmds, s.Name)
		default:
			for _, sub := range s.Subcommands {
				if forwarded(sub) {
					cmds = append(cmds, sub.Name)
				}
			}
		}
	}
	slices.Sort(cmds)
	return cmds
}

// redisLinkRule is RedisLinkUser's ACL rule for a password's SHA-256, as ACL SETUSER takes it.
func redisLinkRule(passwordHash string) []string {
	rule := []string{"on", "#" + passwordHash, "~*", "resetchannels", "-@all"}
	for _, c := range redisLinkCommands() {
		rule = append(rule, "+"+c)
	}
	return rule
}

// redisLinkACL is RedisLinkUser's line of the ACL file for a password's SHA-256.
func redisLinkACL(passwordHash string) string {
	return "user " + RedisLinkUser + " " + strings.Join(redisLinkRule(passwordHash), " ")
}

// restrictRedisLink gives the running engine serving socket today's RedisLinkUser rule (ACL
// SETUSER; WriteRedisACL first gives its directory a password if it has none): an engine an
// older sidecar started, without the link user or with an older rule, is restricted without a
// relaunch.
func restrictRedisLink(c redisClient, socket string) error {
	dir := filepath.Dir(socket)
	password, err := readLinkPassword(dir)
	if err == nil && password == "" {
		password, err = WriteRedisACL(dir)
	}
	if err != nil {
		return err
	}
	hash := sha256.Sum256([]byte(password))
	args := append([]string{"ACL", "SETUSER", RedisLinkUser, "reset"}, redisLinkRule(hex.EncodeToString(hash[:]))...)
	return c.doOK(args...)
}

// WriteRedisACL gives a redis engine's directory a RedisLinkUser password (0600) and the ACL
// file naming it by its hash (RedisACLFile, for redis-server's --aclfile), so the password
// shows on no command line, and returns the password. A directory keeps its password, so the
// proxy's links still log in to an engine relaunched after a crash.
func WriteRedisACL(dir string) (string, error) {
	password, err := readLinkPassword(dir)
	if err != nil {
		return "", err
	}
	if password == "" {
		raw := make([]byte, linkPasswordBytes)
		if _, err := rand.Read(raw); err != nil {
			return "", err
		}
		password = hex.EncodeToString(raw)
		if err := os.WriteFile(filepath.Join(dir, linkPasswordFile), []byte(password), 0o600); err != nil {
			return "", err
		}
	}
	hash := sha256.Sum256([]byte(password))
	acl := "user default on nopass ~* &* +@all\n" + redisLinkACL(hex.EncodeToString(hash[:])) + "\n"
	return password, os.WriteFile(filepath.Join(dir, RedisACLFile), []byte(acl), 0o600)
}

// RedisLinkPassword is RedisLinkUser's password for the engine serving socket; empty for an
// engine without one (memcached, or a redis started before engines had it).
func RedisLinkPassword(socket string) (string, error) { return readLinkPassword(filepath.Dir(socket)) }

// readLinkPassword reads an engine directory's RedisLinkUser password, empty when it has none.
func readLinkPassword(dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, linkPasswordFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("engine link password: %w", err)
	}
	return string(raw), nil
}
