// Command nsb-apply declares the custom resources of a RabbitMQ Messaging Topology Operator manifest on a broker
// through the operator's own code, without Kubernetes: each document is decoded into the operator's api/v1beta1
// type (sigs.k8s.io/yaml, strictly: a field the type does not have is an error) and sent as the operator's
// controllers send it (internal/controller/*_controller.go DeclareFunc: internal.Generate* then the rabbit-hole
// client the operator's rabbitmqclient factory builds). Kept in nsb-delays' tools/topology-operator/ and built
// inside a copy of the operator's module (tools/topology-operator/build.sh), since Go lets only the module itself
// import its internal/ packages.
//
// Usage: nsb-apply -f MANIFEST -uri http://host:15672 -username U -password P [-secrets FILE]
// FILE stands in for the Secrets a User imports its credentials from: {"secret-name": {"username": "...",
// "password": "..."}}, each as a Secret's stringData.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	rabbithole "github.com/michaelklishin/rabbit-hole/v3"
	topology "github.com/rabbitmq/messaging-topology-operator/api/v1beta1"
	"github.com/rabbitmq/messaging-topology-operator/internal"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// order: users, then what bindings and grants name, then those (the operator retries; this command does not).
var order = []string{"User", "Exchange", "Queue", "Binding", "Policy", "OperatorPolicy", "Permission", "TopicPermission"}

type document struct {
	kind, name string
	raw        []byte
}

func main() {
	manifest := flag.String("f", "", "the manifest (a YAML stream of rabbitmq.com/v1beta1 resources)")
	uri := flag.String("uri", os.Getenv("RABBITMQ_URI"), "the broker's management API URL (env RABBITMQ_URI)")
	username := flag.String("username", os.Getenv("RABBITMQ_USERNAME"), "management user (env RABBITMQ_USERNAME)")
	password := flag.String("password", os.Getenv("RABBITMQ_PASSWORD"), "its password (env RABBITMQ_PASSWORD)")
	secretsFile := flag.String("secrets", "", "JSON: secret name -> its string data (username, password)")
	flag.Parse()
	if err := run(*manifest, *uri, *username, *password, *secretsFile); err != nil {
		fmt.Fprintln(os.Stderr, "nsb-apply:", err)
		os.Exit(1)
	}
}

func run(manifest, uri, username, password, secretsFile string) error {
	if manifest == "" || uri == "" {
		return errors.New("give -f MANIFEST and -uri URL")
	}
	secrets := map[string]map[string]string{}
	if secretsFile != "" {
		data, err := os.ReadFile(secretsFile)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &secrets); err != nil {
			return fmt.Errorf("%s: %w", secretsFile, err)
		}
	}
	documents, err := read(manifest)
	if err != nil {
		return err
	}
	// as rabbitmqclient.RabbitholeClientFactory builds it for a cluster without TLS
	client, err := rabbithole.NewClient(uri, username, password)
	if err != nil {
		return err
	}
	count := 0
	for _, kind := range order {
		for _, d := range documents {
			if d.kind != kind {
				continue
			}
			if err := declare(client, d, secrets); err != nil {
				return fmt.Errorf("%s %s: %w", d.kind, d.name, err)
			}
			count++
		}
	}
	if count != len(documents) {
		return fmt.Errorf("%d documents of a kind this command does not declare", len(documents)-count)
	}
	fmt.Printf("declared %d resources\n", count)
	return nil
}

func read(path string) ([]document, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(file))
	var documents []document
	for {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return documents, nil
		}
		if err != nil {
			return nil, err
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(raw, &head); err != nil {
			return nil, err
		}
		if head.Kind == "" && len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		if head.APIVersion != topology.GroupVersion.String() {
			return nil, fmt.Errorf("%s %s: apiVersion %q, not %s", head.Kind, head.Metadata.Name, head.APIVersion,
				topology.GroupVersion)
		}
		documents = append(documents, document{head.Kind, head.Metadata.Name, raw})
	}
}

func declare(client *rabbithole.Client, d document, secrets map[string]map[string]string) error {
	switch d.kind {
	case "User":
		user := &topology.User{}
		if err := yaml.UnmarshalStrict(d.raw, user); err != nil {
			return err
		}
		return declareUser(client, user, secrets)
	case "Exchange":
		exchange := &topology.Exchange{}
		if err := yaml.UnmarshalStrict(d.raw, exchange); err != nil {
			return err
		}
		settings, err := internal.GenerateExchangeSettings(exchange)
		if err != nil {
			return err
		}
		return validate(client.DeclareExchange(exchange.Spec.Vhost, exchange.Spec.Name, *settings))
	case "Queue":
		queue := &topology.Queue{}
		if err := yaml.UnmarshalStrict(d.raw, queue); err != nil {
			return err
		}
		settings, err := internal.GenerateQueueSettings(queue)
		if err != nil {
			return err
		}
		return validate(client.DeclareQueue(queue.Spec.Vhost, queue.Spec.Name, *settings))
	case "Binding":
		binding := &topology.Binding{}
		if err := yaml.UnmarshalStrict(d.raw, binding); err != nil {
			return err
		}
		info, err := internal.GenerateBindingInfo(binding)
		if err != nil {
			return err
		}
		return validate(client.DeclareBinding(binding.Spec.Vhost, *info))
	default:
		return declareGrantOrPolicy(client, d)
	}
}

func declareGrantOrPolicy(client *rabbithole.Client, d document) error {
	switch d.kind {
	case "Policy":
		policy := &topology.Policy{}
		if err := yaml.UnmarshalStrict(d.raw, policy); err != nil {
			return err
		}
		generated, err := internal.GeneratePolicy(policy)
		if err != nil {
			return err
		}
		return validate(client.PutPolicy(policy.Spec.Vhost, policy.Spec.Name, *generated))
	case "OperatorPolicy":
		policy := &topology.OperatorPolicy{}
		if err := yaml.UnmarshalStrict(d.raw, policy); err != nil {
			return err
		}
		generated, err := internal.GenerateOperatorPolicy(policy)
		if err != nil {
			return err
		}
		return validate(client.PutOperatorPolicy(policy.Spec.Vhost, policy.Spec.Name, *generated))
	case "Permission":
		permission := &topology.Permission{}
		if err := yaml.UnmarshalStrict(d.raw, permission); err != nil {
			return err
		}
		if permission.Spec.User == "" {
			return errors.New("spec.user is empty (a userReference needs Kubernetes)")
		}
		return validate(client.UpdatePermissionsIn(permission.Spec.Vhost, permission.Spec.User,
			internal.GeneratePermissions(permission)))
	case "TopicPermission":
		permission := &topology.TopicPermission{}
		if err := yaml.UnmarshalStrict(d.raw, permission); err != nil {
			return err
		}
		if permission.Spec.User == "" {
			return errors.New("spec.user is empty (a userReference needs Kubernetes)")
		}
		return validate(client.UpdateTopicPermissionsIn(permission.Spec.Vhost, permission.Spec.User,
			internal.GenerateTopicPermissions(permission)))
	}
	return fmt.Errorf("kind %q is not declared by this command", d.kind)
}

// declareUser: the User controller's declareWithImportedCredentials, with the Secret read from -secrets.
func declareUser(client *rabbithole.Client, user *topology.User, secrets map[string]map[string]string) error {
	if user.Spec.ImportCredentialsSecret == nil {
		return errors.New("no spec.importCredentialsSecret (generated credentials need Kubernetes)")
	}
	name := user.Spec.ImportCredentialsSecret.Name
	data, ok := secrets[name]
	if !ok {
		return fmt.Errorf("could not find password secret %s (give it in -secrets)", name)
	}
	credentials := internal.UserCredentials{Username: data["username"], Password: data["password"]}
	if hash, ok := data["passwordHash"]; ok {
		credentials.PasswordHash = &hash
	}
	settings, err := internal.GenerateUserSettings(credentials, user.Spec.Tags)
	if err != nil {
		return err
	}
	if err := validate(client.PutUser(settings.Name, settings)); err != nil {
		return err
	}
	if limits := internal.GenerateUserLimits(user.Spec.UserLimits); len(limits) > 0 {
		return validate(client.PutUserLimits(settings.Name, limits))
	}
	return nil
}

// validate: as internal/controller/utils.go validateResponse, a status of 300 or more is an error with its body.
func validate(res *http.Response, err error) error {
	if err != nil {
		return err
	}
	if res == nil {
		return errors.New("failed to validate empty HTTP response")
	}
	defer res.Body.Close()
	if res.StatusCode >= http.StatusMultipleChoices {
		body, _ := io.ReadAll(res.Body)
		return fmt.Errorf("%s: %s", res.Status, bytes.TrimSpace(body))
	}
	return nil
}
