// Package connectors is the example of docs/mcp.md#connectors: a
// third-party MCP server (weather.py, written with fastmcp) and a small
// REST API (PetStore, described by petstore.yaml) joined as agents by
// `agentreach connect`, with no agent code written for either. The test
// runs it end to end.
package connectors

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// Pet is one pet of the store.
type Pet struct {
	ID      int    `json:"id"`
	Name    string `json:"name"`
	Species string `json:"species,omitempty"`
}

// PetStore returns the REST API petstore.yaml describes: GET and POST
// /pets, GET /pets/{id}. It keeps its pets in memory.
func PetStore() http.Handler {
	var (
		mu   sync.Mutex
		pets = []Pet{{ID: 1, Name: "Rex", Species: "dog"}}
	)
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /pets", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
		if err != nil || limit > len(pets) {
			limit = len(pets)
		}
		reply(w, http.StatusOK, pets[:limit])
	})
	mux.HandleFunc("POST /pets", func(w http.ResponseWriter, r *http.Request) {
		var p Pet
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Name == "" {
			reply(w, http.StatusBadRequest, map[string]string{"error": "a pet needs a name"})
			return
		}
		mu.Lock()
		defer mu.Unlock()
		p.ID = len(pets) + 1
		pets = append(pets, p)
		reply(w, http.StatusCreated, p)
	})
	mux.HandleFunc("GET /pets/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.Atoi(r.PathValue("id"))
		mu.Lock()
		defer mu.Unlock()
		if id < 1 || id > len(pets) {
			reply(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no pet %d", id)})
			return
		}
		reply(w, http.StatusOK, pets[id-1])
	})
	return mux
}
