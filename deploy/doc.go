// Package deploy holds the docker-compose stack, NATS configs and Dockerfile; its tests validate them statically.
package deploy
