// Form input (+ persistence): a two-page registration form for a community meetup. Page 1 is the
// Form Trigger, page 2 a Form node; the answers of both pages are combined and stored unedited in
// the `meetup_registrations` Data Table before anything else, then a confirmation email goes out
// and a Form Ending page closes the form. Attribution is off on every page.
import { expr, newCredential, node, trigger, workflow } from '@n8n/workflow-sdk';

const pageOne = trigger({
  type: 'n8n-nodes-base.formTrigger',
  version: 2.5,
  config: {
    name: 'Registration Form',
    parameters: {
      formTitle: 'Lisbon Automation Meetup — registration',
      formDescription: 'Thursday 12 June, 18:30. It takes one minute.',
      formFields: {
        values: [
          { fieldLabel: 'Full name', fieldName: 'fullName', fieldType: 'text', requiredField: true },
          { fieldLabel: 'Email', fieldName: 'email', fieldType: 'email', requiredField: true },
          {
            fieldLabel: 'Ticket',
            fieldName: 'ticket',
            fieldType: 'dropdown',
            fieldOptions: { values: [{ option: 'Standard' }, { option: 'Student' }, { option: 'Supporter' }] },
            requiredField: true,
          },
        ],
      },
      options: { appendAttribution: false, buttonLabel: 'Next' },
    },
    // Verification feeds the flat field map (see trigger-input-shapes.md).
    pinData: [{ fullName: 'Rui Costa', email: 'rui@example.com', ticket: 'Student', submittedAt: '2025-05-02T10:00:00.000Z', formMode: 'instanceAi' }],
  },
});

const pageTwo = node({
  type: 'n8n-nodes-base.form',
  version: 2.5,
  config: {
    name: 'Preferences Page',
    parameters: {
      operation: 'page',
      defineForm: 'fields',
      formFields: {
        values: [
          {
            fieldLabel: 'Dietary needs',
            fieldName: 'diet',
            fieldType: 'radio',
            fieldOptions: { values: [{ option: 'None' }, { option: 'Vegetarian' }, { option: 'Vegan' }, { option: 'Gluten-free' }] },
          },
          {
            fieldLabel: 'Workshops you would join',
            fieldName: 'workshops',
            fieldType: 'checkbox',
            fieldOptions: { values: [{ option: 'Intro to webhooks' }, { option: 'AI agents in practice' }] },
          },
        ],
      },
      options: { formTitle: 'A few preferences', appendAttribution: false },
    },
    pinData: [{ diet: 'Vegan', workshops: ['AI agents in practice'] }],
  },
});

// Page 2 replaced the item, so page 1's answers are read from the trigger by name.
const combine = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Combine Answers',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [
          { id: 'fullName', name: 'fullName', value: expr("{{ $('Registration Form').item.json.fullName }}"), type: 'string' },
          { id: 'email', name: 'email', value: expr("{{ $('Registration Form').item.json.email }}"), type: 'string' },
          { id: 'ticket', name: 'ticket', value: expr("{{ $('Registration Form').item.json.ticket }}"), type: 'string' },
          { id: 'diet', name: 'diet', value: expr('{{ $json.diet }}'), type: 'string' },
          { id: 'workshops', name: 'workshops', value: expr("{{ ($json.workshops || []).join(', ') }}"), type: 'string' },
          { id: 'submittedAt', name: 'submittedAt', value: expr("{{ $('Registration Form').item.json.submittedAt }}"), type: 'string' },
        ],
      },
      options: {},
    },
  },
});

// Raw storage straight after collection; column names equal the JSON keys.
const store = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Store Registration',
    parameters: {
      resource: 'row',
      operation: 'insert',
      dataTableId: { __rl: true, mode: 'name', value: 'meetup_registrations' },
      columns: { mappingMode: 'autoMapInputData', value: {} },
      options: {},
    },
  },
});

const confirm = node({
  type: 'n8n-nodes-base.emailSend',
  version: 2.1,
  config: {
    name: 'Send Confirmation',
    parameters: {
      resource: 'email',
      operation: 'send',
      fromEmail: 'Meetup Team <meetup@example.com>',
      toEmail: expr("{{ $('Combine Answers').item.json.email }}"),
      subject: 'You are registered for the Lisbon Automation Meetup',
      emailFormat: 'html',
      html: expr("<p>Hi {{ $('Combine Answers').item.json.fullName }},</p><p>your {{ $('Combine Answers').item.json.ticket }} ticket is confirmed. See you on 12 June!</p>"),
      options: { appendAttribution: false },
    },
    credentials: { smtp: newCredential('Meetup SMTP') },
  },
});

const ending = node({
  type: 'n8n-nodes-base.form',
  version: 2.5,
  config: {
    name: 'Form Ending',
    parameters: {
      operation: 'completion',
      respondWith: 'text',
      completionTitle: 'See you there!',
      completionMessage: expr("Thanks {{ $('Combine Answers').item.json.fullName }} — a confirmation is on its way to your inbox."),
      options: {},
    },
  },
});

export default workflow('event-registration-form', 'Meetup registration form')
  .add(pageOne)
  .to(pageTwo)
  .to(combine)
  .to(store)
  .to(confirm)
  .to(ending);
