package a2a

import (
	"encoding/json"
	"time"
)

// ProtocolVersion is the A2A version served; a request's A2A-Version must
// have its major version.
const ProtocolVersion = "1.0"

// HeaderVersion is the HTTP header naming the A2A version a client speaks.
const HeaderVersion = "A2A-Version"

// BindingJSONRPC is the protocol binding of the interfaces served.
const BindingJSONRPC = "JSONRPC"

// Extensions of the cards (AgentCapabilities.extensions).
const (
	// ExtensionSchemas carries each skill's JSON Schemas:
	// params {"skills": {"<capability>": {"input_schema", "output_schema"}}}.
	ExtensionSchemas = "urn:agentreach:a2a:schemas:v1"
	// ExtensionReadiness carries the type's readiness from the live
	// records: params {"state", "instances", "ready", "heartbeat_age_ms"}.
	ExtensionReadiness = "urn:agentreach:a2a:readiness:v1"
	// ExtensionAgents, on the gateway's card, lists the card of each
	// agent type: params {"cards": {"<type>": "<url>"}}.
	ExtensionAgents = "urn:agentreach:a2a:agents:v1"
)

// Readiness states (ExtensionReadiness).
const (
	ReadinessReady       = "ready"       // an instance is ready with a free slot
	ReadinessBusy        = "busy"        // ready instances, every slot taken
	ReadinessDraining    = "draining"    // instances, all draining
	ReadinessUnavailable = "unavailable" // no live instance
)

// TaskState is a task's state, by its A2A 1.0 enum name.
type TaskState string

// The task states used here.
const (
	StateSubmitted    TaskState = "TASK_STATE_SUBMITTED"
	StateWorking      TaskState = "TASK_STATE_WORKING"
	StateCompleted    TaskState = "TASK_STATE_COMPLETED"
	StateFailed       TaskState = "TASK_STATE_FAILED"
	StateCanceled     TaskState = "TASK_STATE_CANCELED"
	StateRejected     TaskState = "TASK_STATE_REJECTED"
	StateAuthRequired TaskState = "TASK_STATE_AUTH_REQUIRED"
)

// Terminal reports whether s is a final state.
func (s TaskState) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateCanceled, StateRejected:
		return true
	}
	return false
}

// Role names, by their A2A 1.0 enum names.
const (
	RoleUser  = "ROLE_USER"
	RoleAgent = "ROLE_AGENT"
)

// AgentCard describes an agent: who it is, where and how to call it, and
// its skills.
type AgentCard struct {
	Name                 string                    `json:"name"`
	Description          string                    `json:"description"`
	SupportedInterfaces  []AgentInterface          `json:"supportedInterfaces"`
	Provider             *AgentProvider            `json:"provider,omitempty"`
	Version              string                    `json:"version"`
	DocumentationURL     string                    `json:"documentationUrl,omitempty"`
	Capabilities         AgentCapabilities         `json:"capabilities"`
	SecuritySchemes      map[string]SecurityScheme `json:"securitySchemes,omitempty"`
	SecurityRequirements []SecurityRequirement     `json:"securityRequirements,omitempty"`
	DefaultInputModes    []string                  `json:"defaultInputModes"`
	DefaultOutputModes   []string                  `json:"defaultOutputModes"`
	Skills               []AgentSkill              `json:"skills"`
}

// AgentInterface is one URL where the agent is served, with its binding.
type AgentInterface struct {
	URL             string `json:"url"`
	ProtocolBinding string `json:"protocolBinding"`
	ProtocolVersion string `json:"protocolVersion"`
}

// AgentProvider names who runs the agent.
type AgentProvider struct {
	URL          string `json:"url"`
	Organization string `json:"organization"`
}

// AgentCapabilities says which optional parts of A2A the agent serves.
type AgentCapabilities struct {
	Streaming         bool             `json:"streaming"`
	PushNotifications bool             `json:"pushNotifications"`
	Extensions        []AgentExtension `json:"extensions,omitempty"`
}

// AgentExtension is an extension the agent uses, with its parameters.
type AgentExtension struct {
	URI         string         `json:"uri"`
	Description string         `json:"description,omitempty"`
	Required    bool           `json:"required"`
	Params      map[string]any `json:"params,omitempty"`
}

// AgentSkill is one thing the agent does: here, one capability.
type AgentSkill struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
	InputModes  []string `json:"inputModes,omitempty"`
	OutputModes []string `json:"outputModes,omitempty"`
}

// SecurityScheme is one way to authenticate (only HTTP bearer here).
type SecurityScheme struct {
	HTTPAuth *HTTPAuthSecurityScheme `json:"httpAuthSecurityScheme,omitempty"`
}

// HTTPAuthSecurityScheme is HTTP authentication with a scheme (Bearer).
type HTTPAuthSecurityScheme struct {
	Description  string `json:"description,omitempty"`
	Scheme       string `json:"scheme"`
	BearerFormat string `json:"bearerFormat,omitempty"`
}

// SecurityRequirement names the schemes a call needs, each with its scopes.
type SecurityRequirement struct {
	Schemes map[string]StringList `json:"schemes"`
}

// StringList is a list of strings (the protobuf wrapper's JSON form).
type StringList struct {
	List []string `json:"list"`
}

// Message is one message of a conversation.
type Message struct {
	MessageID        string         `json:"messageId"`
	ContextID        string         `json:"contextId,omitempty"`
	TaskID           string         `json:"taskId,omitempty"`
	Role             string         `json:"role"`
	Parts            []Part         `json:"parts"`
	Metadata         map[string]any `json:"metadata,omitempty"`
	Extensions       []string       `json:"extensions,omitempty"`
	ReferenceTaskIDs []string       `json:"referenceTaskIds,omitempty"`
}

// Part is one piece of content: exactly one of text, raw (base64), url or
// data (any JSON value).
type Part struct {
	Text      *string         `json:"text,omitempty"`
	Raw       []byte          `json:"raw,omitempty"`
	URL       *string         `json:"url,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Metadata  map[string]any  `json:"metadata,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
}

// Task is the unit of work a message starts.
type Task struct {
	ID        string        `json:"id"`
	ContextID string        `json:"contextId"`
	Status    TaskStatus    `json:"status"`
	Artifacts []Artifact    `json:"artifacts,omitempty"`
	History   []Message     `json:"history,omitempty"`
	Metadata  *TaskMetadata `json:"metadata,omitempty"`
}

// TaskMetadata is a task's metadata: what Agent-Reach did with it.
type TaskMetadata struct {
	AgentReach ReachMetadata `json:"agentreach"`
}

// ReachMetadata is the routed call behind a task: its capability and
// request id, the instance that answered (Reach-Node) and the error code
// of a task that did not complete.
type ReachMetadata struct {
	Capability string `json:"capability"`
	RequestID  string `json:"request_id"`
	Node       string `json:"node,omitempty"`
	Code       string `json:"code,omitempty"`
}

// TaskStatus is a task's state, with the agent's message about it.
type TaskStatus struct {
	State     TaskState `json:"state"`
	Message   *Message  `json:"message,omitempty"`
	Timestamp time.Time `json:"timestamp"`
}

// Artifact is an output of a task.
type Artifact struct {
	ArtifactID string `json:"artifactId"`
	Name       string `json:"name,omitempty"`
	Parts      []Part `json:"parts"`
}

// SendMessageRequest is the params of SendMessage and SendStreamingMessage.
type SendMessageRequest struct {
	Tenant        string                    `json:"tenant,omitempty"`
	Message       *Message                  `json:"message"`
	Configuration *SendMessageConfiguration `json:"configuration,omitempty"`
	Metadata      map[string]any            `json:"metadata,omitempty"`
}

// SendMessageConfiguration is how the sender wants the answer.
type SendMessageConfiguration struct {
	AcceptedOutputModes        []string        `json:"acceptedOutputModes,omitempty"`
	TaskPushNotificationConfig json.RawMessage `json:"taskPushNotificationConfig,omitempty"`
	HistoryLength              *int32          `json:"historyLength,omitempty"`
	ReturnImmediately          bool            `json:"returnImmediately,omitempty"`
}

// SendMessageResponse is the result of SendMessage: here always a task.
type SendMessageResponse struct {
	Task *Task `json:"task,omitempty"`
}

// StreamResponse is one event of SendStreamingMessage: exactly one of
// its fields.
type StreamResponse struct {
	Task           *Task                    `json:"task,omitempty"`
	ArtifactUpdate *TaskArtifactUpdateEvent `json:"artifactUpdate,omitempty"`
}

// TaskArtifactUpdateEvent is a piece of a task's artifact as it is made:
// append adds its parts to the artifact of the same id sent before
// (false: it starts or replaces it); lastChunk says no more follow.
type TaskArtifactUpdateEvent struct {
	TaskID    string   `json:"taskId"`
	ContextID string   `json:"contextId"`
	Artifact  Artifact `json:"artifact"`
	Append    bool     `json:"append"`
	LastChunk bool     `json:"lastChunk"`
}

// GetTaskRequest is the params of GetTask.
type GetTaskRequest struct {
	Tenant        string `json:"tenant,omitempty"`
	ID            string `json:"id"`
	HistoryLength *int32 `json:"historyLength,omitempty"`
}

// CancelTaskRequest is the params of CancelTask.
type CancelTaskRequest struct {
	Tenant   string         `json:"tenant,omitempty"`
	ID       string         `json:"id"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// ListTasksRequest is the params of ListTasks.
type ListTasksRequest struct {
	Tenant               string     `json:"tenant,omitempty"`
	ContextID            string     `json:"contextId,omitempty"`
	Status               TaskState  `json:"status,omitempty"`
	PageSize             *int32     `json:"pageSize,omitempty"`
	PageToken            string     `json:"pageToken,omitempty"`
	HistoryLength        *int32     `json:"historyLength,omitempty"`
	StatusTimestampAfter *time.Time `json:"statusTimestampAfter,omitempty"`
	IncludeArtifacts     *bool      `json:"includeArtifacts,omitempty"`
}

// ListTasksResponse is the result of ListTasks.
type ListTasksResponse struct {
	Tasks         []Task `json:"tasks"`
	NextPageToken string `json:"nextPageToken"`
	PageSize      int32  `json:"pageSize"`
	TotalSize     int32  `json:"totalSize"`
}
