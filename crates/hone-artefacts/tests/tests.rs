mod artefacts;
